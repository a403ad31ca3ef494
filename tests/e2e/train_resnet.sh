# The ResNet (zoo/resnet.h) end to end, on synthetic images at depth 8, width 4:
#  1. SyncBatchNorm: DP(2) and DDP(2) on shm with --sync-bn at 8 per replica reach the test
#     loss of single mode at 16 (the same global batches) within 1e-4; without it DDP still
#     ends with bit-identical replicas, buffers included (rank 0's broadcast every step), and
#     --no-broadcast-buffers is recorded in the summary;
#  2. a resumed run is bit-identical to an uninterrupted one, parameters and buffers, in
#     single, dp --sync-bn and ddp --sync-bn;
#  3. --activation-checkpointing gives bit-identical parameters and buffers (resnet per
#     stage, single and DDP; gpt per block with dropout), and DDP's buckets still start
#     before backward ends (the trace of a checkpointed GPT under DDP(2));
#  4. usage errors exit 2 naming the flag.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
CHECK="$(dirname "$0")/check_summary.py"
COMMON=(--data synthetic --synthetic-train 512 --synthetic-test 128 --model resnet --depth 8 --width 4
        --no-progress --threads 1 --epochs 100 --max-steps 6 --bucket-cap-mb 0.002)
ddp() {  # ddp ARGS...: DDP(2) on shared memory
  "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp --backend shm "$@"
}

# 1. SyncBatchNorm against single on the same global batches.
expect 0 "done:" -- "$T" "${COMMON[@]}" --batch-size 16 --summary-json "$TMP/single.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" --mode dp --devices 2 --sync-bn --batch-size 8 --summary-json "$TMP/dp.json"
expect 0 "done:" -- ddp --sync-bn --batch-size 8 --summary-json "$TMP/ddp.json"
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/dp.json" --loss-near "$TMP/single.json" 1e-4
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/ddp.json" --loss-near "$TMP/single.json" 1e-4 --replicas-identical
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/ddp.json" --loss-near "$TMP/dp.json" 1e-4
expect 0 "done:" -- ddp --batch-size 8 --summary-json "$TMP/local.json"
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/local.json" --replicas-identical
expect 0 "done:" -- ddp --batch-size 8 --no-broadcast-buffers --summary-json "$TMP/nobcast.json"
expect 0 '"broadcast_buffers": false' -- cat "$TMP/nobcast.json"

# 2. Resume: 3 steps, then 3 more from the checkpoint, against 6 at once.
resume_matches() {  # resume_matches NAME RUNNER ARGS...
  local name="$1" runner="$2"; shift 2
  expect 0 "done:" -- $runner "$@" --checkpoint-dir "$TMP/$name.full" --summary-json "$TMP/$name.full.json"
  mkdir -p "$TMP/$name.part"
  cp -r "$TMP/$name.full/step-00000003" "$TMP/$name.part/"
  expect 0 "checkpoint: loaded" -- $runner "$@" --checkpoint-dir "$TMP/$name.part" --resume auto \
    --summary-json "$TMP/$name.resumed.json"
  expect 0 "summary ok" -- python3 "$CHECK" "$TMP/$name.resumed.json" --steps 6 \
    --same-checksum "$TMP/$name.full.json" --same-buffers "$TMP/$name.full.json"
}
single() { "$T" "${COMMON[@]}" "$@"; }
dp() { "$T" "${COMMON[@]}" --mode dp --devices 2 --sync-bn "$@"; }
ddpsync() { ddp --sync-bn "$@"; }
resume_matches single single --batch-size 16 --save-every 3 --keep-last 0
resume_matches dp dp --batch-size 8 --save-every 3 --keep-last 0
resume_matches ddp ddpsync --batch-size 8 --save-every 3 --keep-last 0

# 3. Activation checkpointing changes memory, not results.
expect 0 "done:" -- single --batch-size 16 --activation-checkpointing --summary-json "$TMP/ac.json"
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/ac.json" --same-checksum "$TMP/single.json" \
  --same-buffers "$TMP/single.json"
expect 0 "done:" -- ddp --sync-bn --batch-size 8 --activation-checkpointing --summary-json "$TMP/ddp_ac.json"
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/ddp_ac.json" --same-checksum "$TMP/ddp.json" \
  --same-buffers "$TMP/ddp.json" --replicas-identical
GPT=(--model gpt --data shakespeare --n-layer 2 --n-head 2 --n-embd 32 --context 16 --dropout 0.1 --batch-size 4
     --max-steps 4 --no-progress --threads 1)
expect 0 "done:" -- "$T" "${GPT[@]}" --summary-json "$TMP/gpt.json"
expect 0 "done:" -- "$T" "${GPT[@]}" --activation-checkpointing --summary-json "$TMP/gpt_ac.json"
expect 0 "summary ok" -- python3 "$CHECK" "$TMP/gpt_ac.json" --same-checksum "$TMP/gpt.json"

# The reducer still overlaps under checkpointing: in every step after the first, a bucket's
# all-reduce starts before the step's last backward span (a recomputed block) begins.
expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${GPT[@]}" --mode ddp --backend shm \
  --activation-checkpointing --bucket-cap-mb 0.01 --trace "$TMP/gpt_ac_trace.json"
expect 0 "overlaps" -- python3 - "$TMP/gpt_ac_trace.rank0.json" <<'PY'
import json, sys
events = sorted((e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"])
steps, current = [], []
for e in events:
    if e["name"] == "optimizer step":
        steps.append(current)
        current = []
    else:
        current.append(e)
assert len(steps) == 4, f"{len(steps)} optimizer steps traced"
for i, step in enumerate(steps[1:], 1):
    first_bucket = min(e["ts"] for e in step if e["name"].startswith("allreduce bucket"))
    last_backward = max(e["ts"] for e in step if e["name"].startswith("backward blocks."))
    assert first_bucket < last_backward, f"step {i}: the first bucket starts after the last block's backward"
print("the reducer overlaps with checkpointed backward")
PY

# 4. Usage errors.
expect 2 "--depth must be 6n + 2" -- "$T" "${COMMON[@]}" --depth 9
expect 2 "--width must be positive" -- "$T" "${COMMON[@]}" --width 0
expect 2 "--depth is a flag of --model resnet" -- "$T" --model mlp --depth 20
expect 2 "--activation-checkpointing needs --model gpt or --model resnet" -- "$T" --model mlp --activation-checkpointing
expect 2 "--no-broadcast-buffers needs --mode ddp" -- "$T" "${COMMON[@]}" --no-broadcast-buffers
finish
