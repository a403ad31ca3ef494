# --comm-hook powersgd (runtime/strategy/powersgd.h, docs/scaling.md) on two real ranks:
# it trains with replicas identical; a run stopped at a checkpoint and resumed ends
# bit-identical to an uninterrupted one (every rank's error feedback and the warm-start
# matrices are in comm_hook.safetensors); gradient accumulation works; the model's gate
# logs its decision; resuming with another rank, a damaged state file, and the combinations
# it refuses exit non-zero naming the problem.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
RUN=("$BIN/tandemrun" --nproc-per-node 2 --master-port 0 --)
COMMON=(--data synthetic --synthetic-train 1024 --model mlp --hidden 256 --batch-size 32 --mode ddp --no-progress
        --threads 1 --lr 0.05 --min-lr 0.05 --warmup-steps 0 --comm-hook powersgd --powersgd-gate always
        --powersgd-start-step 3)

expect 0 "done:" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 12 --summary-json "$TMP/whole.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/whole.json"
expect 0 "compressed 3 weights" -- python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
p = s["powersgd"]
assert s["replicas_identical"] and p["decided"] and p["rank"] == 1 and p["steps"] == 12, p
print("compressed", p["compressed_params"], "weights")' "$TMP/whole.json"

# Stopped at step 6 (a checkpoint), resumed to 12: the same parameters to the bit (a
# constant learning rate, so that --max-steps 6 does not change the schedule).
expect 0 "done:" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 6 --checkpoint-dir "$TMP/ck" --save-every 6
CK="$TMP/ck/step-00000006"
expect 0 "OK" -- "$BIN/tandem-ckpt" verify "$CK"
expect 0 "powersgd.error.rank1." -- "$BIN/tandem-ckpt" inspect "$CK"
expect 0 "done:" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 12 --checkpoint-dir "$TMP/ck" --resume auto \
  --summary-json "$TMP/resumed.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/resumed.json" --same-checksum "$TMP/whole.json"

# Gradient accumulation: compression runs on the synchronised micro-step's sums.
expect 0 "done:" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 6 --grad-accum 2 --summary-json "$TMP/accum.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/accum.json"

# A frozen weight is in no bucket: never compressed, no state.
expect 0 "done:" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 6 --freeze 'fc1.*' \
  --summary-json "$TMP/frozen.json"
expect 0 "compressed 2 weights" -- python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print("compressed", s["powersgd"]["compressed_params"], "weights")' "$TMP/frozen.json"

# The model's gate decides from this job's own timings and says what it decided.
expect 0 "PowerSGD gate:" -- "${RUN[@]}" "$T" --data synthetic --synthetic-train 1024 --model mlp --hidden 256 \
  --batch-size 32 --mode ddp --no-progress --threads 1 --comm-hook powersgd --powersgd-start-step 4 --max-steps 8

# Bad input: another rank, a damaged state file, refused combinations.
expect 1 "--powersgd-rank 1, this run uses 2" -- "${RUN[@]}" "$T" "${COMMON[@]}" --powersgd-rank 2 --max-steps 12 \
  --resume "$CK"
cp -r "$CK" "$TMP/damaged"
python3 - "$TMP/damaged/comm_hook.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[-5] ^= 0xFF
open(path, "wb").write(bytes(data))
PY
expect 1 "comm_hook.safetensors" -- "${RUN[@]}" "$T" "${COMMON[@]}" --max-steps 12 --resume "$TMP/damaged"
expect 2 "--powersgd-rank needs --comm-hook powersgd" -- "$T" --mode ddp --powersgd-rank 2
expect 2 "--powersgd-rank must be in 1..1024" -- "$T" --mode ddp --comm-hook powersgd --powersgd-rank 0
expect 2 "it takes no --comm-hook powersgd" -- "$T" --mode ddp --comm-hook powersgd --zero 1
expect 2 "not auto" -- "$T" --mode ddp --comm-hook powersgd --bucket-cap-mb auto
expect 2 "--comm-hook needs --mode ddp" -- "$T" --comm-hook powersgd
finish
