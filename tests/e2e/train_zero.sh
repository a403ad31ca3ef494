# ZeRO-1 end to end (docs/zero.md), through the real programs on the shm backend, where
# the all-reduce and the reduce-scatter both add the ranks in rank order, so ZeRO-1 and
# plain DDP are bit-identical at any world size (AdamW, weight decay, no clipping):
#  1. plain DDP(2) and ZeRO-1 DDP(2), 40 steps, checkpoints at 20 and 40: the same
#     parameters, and byte-identical optimizer.safetensors (the shards gathered into a
#     plain run's file); the summary says zero 1 and each rank's state is half of it;
#  2. ZeRO's checkpoint of step 20 resumes in plain DDP(2) (== the uninterrupted runs), in
#     ZeRO-1 DDP(3) (== plain DDP(3) resumed from plain's checkpoint, parameters and
#     optimizer file, so the state was scattered and gathered right at 3 uneven shards),
#     in single and DP(2) (the same model; test loss within 1e-4 of DDP's after 20 more
#     steps, single and DP sum the global batch in another order);
#  3. on gloo, whose reduce-scatter stages rounds of its own (collectives/rounds.h): ZeRO-1
#     DDP(2) == plain DDP(2) bit for bit (two ranks add a + b in either order), and the
#     summary's peak_temporary_bytes is world x the largest shard of a bucket (each
#     shard is below the 1 MiB round), where shm's runs report 0.
# The global batch is 48 in every run (24 x 2, 16 x 3, 48 x 1), so every resume continues
# the same data order.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
COMMON=(--data synthetic --synthetic-train 4096 --synthetic-test 512 --model mlp --hidden 50 --optimizer adamw
        --lr 1e-3 --weight-decay 0.1 --no-progress --threads 1 --epochs 100 --max-steps 40 --bucket-cap-mb 0.05)
ddp() {  # ddp N BATCH ARGS... (BACKEND=shm unless set)
  local n="$1" b="$2"; shift 2
  "$RUN" --nproc-per-node "$n" --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp --backend "${BACKEND:-shm}" \
    --batch-size "$b" "$@"
}

# 1. Plain and ZeRO-1 side by side.
expect 0 "done:" -- ddp 2 24 --checkpoint-dir "$TMP/plain2" --save-every 20 --keep-last 0 \
  --summary-json "$TMP/plain2.json"
expect 0 "zero-1: optimizer state" -- ddp 2 24 --zero 1 --checkpoint-dir "$TMP/zero2" --save-every 20 --keep-last 0 \
  --summary-json "$TMP/zero2.json"
for step in 00000020 00000040; do
  expect 0 "" -- cmp "$TMP/plain2/step-$step/optimizer.safetensors" "$TMP/zero2/step-$step/optimizer.safetensors"
  expect 0 "" -- cmp "$TMP/plain2/step-$step/model.safetensors" "$TMP/zero2/step-$step/model.safetensors"
done
expect 0 "OK" -- "$BIN/tandem-ckpt" verify "$TMP/zero2/step-00000020"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/zero2.json" --mode ddp --steps 40 \
  --same-checksum "$TMP/plain2.json"
expect 0 "state halved" -- python3 - "$TMP/plain2.json" "$TMP/zero2.json" <<'PY'
import json, sys
plain, zero = (json.load(open(p)) for p in sys.argv[1:3])
assert plain["zero"] == 0 and zero["zero"] == 1, (plain["zero"], zero["zero"])
full = 2 * 4 * plain["parameters"] / 2**20  # AdamW: two f32 slots per parameter, MiB
assert len(plain["optimizer_state_mb_per_rank"]) == 2 and all(abs(s - full) < 1e-9 for s in plain["optimizer_state_mb_per_rank"]), plain
shards = zero["optimizer_state_mb_per_rank"]
assert len(shards) == 2 and abs(sum(shards) - full) < 1e-9 and max(shards) <= full / 2 + 1e-3, shards
print("state halved", full, shards)
PY

# 2. ZeRO's step-20 checkpoint resumed elsewhere.
Z="$TMP/zero2/step-00000020"
expect 0 "done:" -- ddp 2 24 --resume "$Z" --summary-json "$TMP/z-plain2.json"
expect 0 "done:" -- ddp 3 16 --zero 1 --resume "$Z" --checkpoint-dir "$TMP/z-zero3" --summary-json "$TMP/z-zero3.json"
expect 0 "done:" -- ddp 3 16 --resume "$TMP/plain2/step-00000020" --checkpoint-dir "$TMP/p-plain3" \
  --summary-json "$TMP/p-plain3.json"
expect 0 "" -- cmp "$TMP/z-zero3/step-00000040/optimizer.safetensors" "$TMP/p-plain3/step-00000040/optimizer.safetensors"
expect 0 "done:" -- "$T" "${COMMON[@]}" --batch-size 48 --resume "$Z" --summary-json "$TMP/z-single.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" --mode dp --devices 2 --batch-size 24 --resume "$Z" \
  --summary-json "$TMP/z-dp2.json"
expect 0 "resumed everywhere" -- python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
s = {k: json.load(open(f"{d}/{k}.json")) for k in ("plain2", "zero2", "z-plain2", "z-zero3", "p-plain3", "z-single", "z-dp2")}
assert s["z-plain2"]["param_checksum"] == s["plain2"]["param_checksum"], "ZeRO(2) checkpoint -> plain DDP(2) == uninterrupted"
assert s["z-zero3"]["param_checksum"] == s["p-plain3"]["param_checksum"], "ZeRO(3) from ZeRO's == plain DDP(3) from plain's"
assert s["z-zero3"]["world_size"] == 3 and s["z-zero3"]["zero"] == 1
for k in ("z-single", "z-dp2", "z-zero3"):
    assert s[k]["steps"] == 40, (k, s[k]["steps"])
    a, b = s[k]["test_loss"], s["plain2"]["test_loss"]
    assert abs(a - b) <= 1e-4 * abs(b), (k, a, b)
print("resumed everywhere", s["plain2"]["param_checksum"], s["z-zero3"]["param_checksum"])
PY

# 3. gloo.
BACKEND=gloo expect 0 "done:" -- ddp 2 24 --summary-json "$TMP/gloo-plain2.json"
BACKEND=gloo expect 0 "done:" -- ddp 2 24 --zero 1 --summary-json "$TMP/gloo-zero2.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/gloo-zero2.json" --mode ddp --steps 40 \
  --same-checksum "$TMP/plain2.json"
expect 0 "staged one round" -- python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
s = {k: json.load(open(f"{d}/{k}.json")) for k in ("gloo-plain2", "gloo-zero2", "zero2")}
assert s["gloo-plain2"]["param_checksum"] == s["gloo-zero2"]["param_checksum"], "gloo: ZeRO-1 == plain DDP"
assert s["zero2"]["peak_temporary_bytes_per_rank"] == [0, 0], s["zero2"]["peak_temporary_bytes_per_rank"]
assert s["gloo-plain2"]["peak_temporary_bytes_per_rank"] == [0, 0], "plain DDP reduce-scatters nothing"
# Each bucket is padded to a multiple of the world size and sharded: 2 x its largest shard.
shard = max(-(-b["bytes"] // 8) * 4 for b in s["gloo-zero2"]["buckets"])
assert s["gloo-zero2"]["peak_temporary_bytes_per_rank"] == [2 * shard] * 2, (s["gloo-zero2"]["peak_temporary_bytes_per_rank"], shard)
print("staged one round", 2 * shard)
PY
finish
