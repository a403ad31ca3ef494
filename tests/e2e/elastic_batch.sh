# tandem-train --elastic-batch (train/elastic_batch.h) through the real programs: a DDP(4)
# job's checkpoint at step 10 (640 samples into the epoch) resumed by fixed jobs of other
# sizes, each compared with the run its flags should amount to.
#  1. global, 4 -> 2: the per-rank batch doubles (16 -> 32), the global batch 64 is kept,
#     and the parameters are bit-identical to a resume with --batch-size 32 given by hand;
#     with --grad-accum 3 (64 / 6 not whole) it is --grad-accum that changes (3 -> 2).
#  2. global, 2 -> 2 again after that change: the checkpoint's 32 a rank, not the flags' 16.
#  3. auto is global under TANDEM_ELASTIC=1 (what an elastic tandemrun sets), off without.
#  4. per-rank, 4 -> 2: --lr 0.02 x 2/4, bit-identical to --lr 0.01 given by hand; then
#     2 -> 3: x 3/4 from the job's first world size, not 3/2 of the last.
#  5. refusals before any step: global 4 -> 3 (64 is not a multiple of 3), and per-rank
#     4 -> 3, where 640 samples are not whole micro-batches of 3 x 16.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset TANDEM_ELASTIC
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
COMMON=(--mode ddp --data synthetic --synthetic-train 4096 --synthetic-test 256 --model mlp --hidden 64
        --lr 0.02 --no-progress --threads 1 --epochs 100)

# run TAG WORLD ARGS...: a fixed DDP job of WORLD ranks writing $TMP/TAG.json.
run() {
  local tag="$1" world="$2"; shift 2
  "$RUN" --nproc-per-node "$world" --master-port 0 -- "$T" "${COMMON[@]}" --summary-json "$TMP/$tag.json" "$@"
}
# from TAG: a checkpoint dir $TMP/TAG holding only the DDP(4) job's step 10.
from() {
  mkdir -p "$TMP/$1" && cp -r "$TMP/ck4/step-00000010" "$TMP/$1/"
}
# check PYTHON_EXPR...: asserts each expression over the summaries s[TAG] of $TMP.
check() {
  expect 0 "summaries agree" -- python3 - "$TMP" "$@" <<'PY'
import glob, json, os, sys
s = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(os.path.join(sys.argv[1], "*.json"))}
for e in sys.argv[2:]:
    assert eval(e), (e, {k: {f: v[f] for f in ("batch_size", "grad_accum", "global_batch", "lr", "elastic_batch",
                                                "base_world_size", "param_checksum")} for k, v in s.items()})
print("summaries agree:", len(sys.argv) - 2, "checks")
PY
}

expect 0 "done:" -- run w4 4 --batch-size 16 --max-steps 10 --checkpoint-dir "$TMP/ck4"
check 's["w4"]["elastic_batch"] == "off" and s["w4"]["base_world_size"] == 4 and s["w4"]["global_batch"] == 64'

# 1. global 4 -> 2, through the per-rank batch and through --grad-accum.
from g2; from g2ref; from a2; from a2ref
expect 0 "world size 4 -> 2: per-rank batch 16 -> 32, --grad-accum 1 -> 1, global batch 64 kept" -- \
  run g2 2 --batch-size 16 --max-steps 20 --checkpoint-dir "$TMP/g2" --resume auto --elastic-batch global
expect 0 "done:" -- run g2ref 2 --batch-size 32 --max-steps 20 --checkpoint-dir "$TMP/g2ref" --resume auto \
  --elastic-batch off
expect 0 "world size 4 -> 2: per-rank batch 16 -> 16, --grad-accum 3 -> 2, global batch 64 kept" -- \
  run a2 2 --batch-size 16 --grad-accum 3 --max-steps 20 --checkpoint-dir "$TMP/a2" --resume auto --elastic-batch global
expect 0 "done:" -- run a2ref 2 --batch-size 16 --grad-accum 2 --max-steps 20 --checkpoint-dir "$TMP/a2ref" \
  --resume auto --elastic-batch off
check 's["g2"]["batch_size"] == 32 and s["g2"]["grad_accum"] == 1 and s["g2"]["global_batch"] == 64' \
      's["g2"]["elastic_batch"] == "global" and s["g2"]["base_world_size"] == 4 and s["g2"]["lr"] == 0.02' \
      's["g2"]["steps"] == 20 and s["g2"]["resumed_from_step"] == 10' \
      's["g2"]["param_checksum"] == s["g2ref"]["param_checksum"]' \
      's["a2"]["batch_size"] == 16 and s["a2"]["grad_accum"] == 2 and s["a2"]["global_batch"] == 64' \
      's["a2"]["param_checksum"] == s["a2ref"]["param_checksum"]' \
      's["g2ref"]["elastic_batch"] == "off" and s["g2ref"]["batch_size"] == 32'

# 2. Resumed at 2 again, the checkpoint (32 a rank) not the flags (16) sets the batch; the
# base world size (4) carries on.
expect 0 "world size 2 -> 2: per-rank batch 16 -> 32" -- \
  run g2again 2 --batch-size 16 --max-steps 30 --checkpoint-dir "$TMP/g2" --resume auto --elastic-batch global
check 's["g2again"]["batch_size"] == 32 and s["g2again"]["global_batch"] == 64' \
      's["g2again"]["resumed_from_step"] == 20 and s["g2again"]["base_world_size"] == 4'

# 3. auto: global where an elastic tandemrun would have set TANDEM_ELASTIC=1.
from auto2
expect 0 "world size 4 -> 2: per-rank batch 16 -> 32" -- env TANDEM_ELASTIC=1 \
  "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${COMMON[@]}" --summary-json "$TMP/auto2.json" \
  --batch-size 16 --max-steps 20 --checkpoint-dir "$TMP/auto2" --resume auto
check 's["auto2"]["elastic_batch"] == "global" and s["auto2"]["param_checksum"] == s["g2"]["param_checksum"]'

# 4. per-rank: the rate scales with the world size, always from the first one (4).
from p2; from p2ref
expect 0 "world size 4 -> 2: per-rank batch 16 kept, global batch 32, learning rate 0.02 x 2/4 = 0.01" -- \
  run p2 2 --batch-size 16 --max-steps 20 --checkpoint-dir "$TMP/p2" --resume auto --elastic-batch per-rank
expect 0 "done:" -- run p2ref 2 --batch-size 16 --lr 0.01 --max-steps 20 --checkpoint-dir "$TMP/p2ref" --resume auto \
  --elastic-batch off
# 640 + 10 x 32 = 960 samples: 20 micro-batches of 3 x 16.
expect 0 "world size 2 -> 3: per-rank batch 16 kept, global batch 48, learning rate 0.02 x 3/4 = 0.015" -- \
  run p3 3 --batch-size 16 --max-steps 30 --checkpoint-dir "$TMP/p2" --resume auto --elastic-batch per-rank
check 's["p2"]["lr"] == 0.01 and s["p2"]["batch_size"] == 16 and s["p2"]["global_batch"] == 32' \
      's["p2"]["elastic_batch"] == "per-rank" and s["p2"]["base_world_size"] == 4' \
      's["p2"]["param_checksum"] == s["p2ref"]["param_checksum"]' \
      's["p3"]["lr"] == 0.015 and s["p3"]["base_world_size"] == 4 and s["p3"]["steps"] == 30'

# 5. Refused before the first step, naming the numbers.
from r3; from q3
expect 1 "the checkpoint's global batch 64 is not a whole number of per-rank batches at world size 3" -- \
  run r3 3 --batch-size 16 --max-steps 20 --checkpoint-dir "$TMP/r3" --resume auto --elastic-batch global
expect 1 "the checkpoint consumed 640 samples of epoch 0, not a whole number of micro-batches of 48" -- \
  run q3 3 --batch-size 16 --max-steps 20 --checkpoint-dir "$TMP/q3" --resume auto --elastic-batch per-rank
for tag in r3 q3; do
  if [ -e "$TMP/$tag.json" ] || [ "$(ls "$TMP/$tag")" != step-00000010 ]; then
    echo "FAIL: the refused run $tag trained (a summary or a new checkpoint)"; FAILED=1
  fi
done
finish
