# The three modes end to end: DataParallel(2) in one process, and DDP(2) under mpirun
# (mpi), spawn_local.sh (gloo) and tandemrun (shm). DP(2) and DDP(2) with batch b follow single with batch 2b (same test loss within 1e-4
# relative after 30 steps of real data), replicas end identical, --no-comm lets them
# diverge, --grad-accum 2 equals the doubled batch, and --trace writes per-rank traces
# with bucket all-reduce spans. --prefetch on (off by default on the CPU) ends with the same
# param_checksum in single, DP, DDP with --grad-accum 2, and resumed from its own checkpoint.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T="$BIN/tandem-train"
SPAWN="$(dirname "$0")/../ddp/spawn_local.sh"
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then DATA=(--data fashion-mnist); else
  DATA=(--data synthetic --synthetic-train 8192); fi
COMMON=("${DATA[@]}" --model mlp --hidden 64 --max-steps 30 --lr 0.05 --no-progress --threads 1)
MPI=(mpirun --oversubscribe -np 2)

expect 0 "done:" -- "$T" "${COMMON[@]}" --batch-size 64 --summary-json "$TMP/single.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" --mode dp --devices 2 --batch-size 32 --summary-json "$TMP/dp.json"
expect 0 "done:" -- "${MPI[@]}" "$T" "${COMMON[@]}" --mode ddp --batch-size 32 --summary-json "$TMP/ddp.json" \
  --trace "$TMP/trace.json"
expect 0 "done:" -- bash "$SPAWN" 2 -- "$T" "${COMMON[@]}" --mode ddp --backend gloo --batch-size 32 \
  --summary-json "$TMP/gloo.json"
expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp \
  --backend shm --batch-size 32 --summary-json "$TMP/shm.json"
expect 0 "done:" -- "${MPI[@]}" "$T" "${COMMON[@]}" --mode ddp --batch-size 16 --grad-accum 2 \
  --summary-json "$TMP/accum.json"
expect 0 "done:" -- "${MPI[@]}" "$T" "${COMMON[@]}" --mode ddp --batch-size 32 --no-comm \
  --summary-json "$TMP/nocomm.json"
expect 0 "done:" -- "${MPI[@]}" "$T" "${COMMON[@]}" --mode ddp --batch-size 32 --comm-hook bf16 --no-overlap \
  --bucket-cap-mb 0.05 --summary-json "$TMP/bf16.json"
PF=(--prefetch on)
expect 0 "prefetch: a loader thread" -- "$T" "${COMMON[@]}" "${PF[@]}" --batch-size 64 --checkpoint-dir "$TMP/ck-pf" \
  --save-every 17 --summary-json "$TMP/single-pf.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" "${PF[@]}" --batch-size 64 --resume "$TMP/ck-pf/step-00000017" \
  --summary-json "$TMP/resumed-pf.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" "${PF[@]}" --mode dp --devices 2 --batch-size 32 --summary-json "$TMP/dp-pf.json"
expect 0 "done:" -- "${MPI[@]}" "$T" "${COMMON[@]}" "${PF[@]}" --mode ddp --batch-size 16 --grad-accum 2 \
  --summary-json "$TMP/accum-pf.json"
expect 2 "--no-prefetch contradicts --prefetch on" -- "$T" --no-prefetch --prefetch on
expect 2 "--no-comm needs --mode ddp" -- "$T" --no-comm
expect 2 "--comm-hook" -- "$T" --mode ddp --comm-hook int8
expect 0 "modes ok" -- python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
def close(a, b, tol):
    return abs(a - b) <= tol * max(abs(b), 1e-12)
s = {k: json.load(open(f"{d}/{k}.json")) for k in ("single", "dp", "ddp", "gloo", "shm", "accum", "nocomm", "bf16")}
assert s["dp"]["mode"] == "dp" and s["dp"]["replicas"] == 2 and s["dp"]["world_size"] == 1
assert s["dp"]["global_batch"] == 64 and s["dp"]["buckets"] == []
assert close(s["dp"]["test_loss"], s["single"]["test_loss"], 1e-4), (s["dp"]["test_loss"], s["single"]["test_loss"])
for k in ("ddp", "gloo", "shm", "accum"):
    assert s[k]["mode"] == "ddp" and s[k]["world_size"] == 2 and s[k]["replicas"] == 2, k
    assert s[k]["replicas_identical"] is True, k
    assert s[k]["global_batch"] == 64, (k, s[k]["global_batch"])
    assert close(s[k]["test_loss"], s["single"]["test_loss"], 1e-4), (k, s[k]["test_loss"], s["single"]["test_loss"])
    assert len(s[k]["buckets"]) >= 1 and all(b["bytes"] > 0 for b in s[k]["buckets"]), k
assert s["ddp"]["backend"] == "mpi" and s["gloo"]["backend"] == "gloo" and s["shm"]["backend"] == "shm"
for k in ("single", "dp", "accum"):
    pf = json.load(open(f"{d}/{k}-pf.json"))
    assert pf["prefetch"] is True and s[k]["prefetch"] is False, k
    assert pf["param_checksum"] == s[k]["param_checksum"], (k, pf["param_checksum"], s[k]["param_checksum"])
resumed = json.load(open(f"{d}/resumed-pf.json"))
assert resumed["resumed_from_step"] == 17 and resumed["param_checksum"] == s["single"]["param_checksum"]
assert s["nocomm"]["replicas_identical"] is False, "--no-comm replicas should diverge"
assert s["bf16"]["replicas_identical"] is True
assert len(s["bf16"]["buckets"]) > len(s["ddp"]["buckets"]), "smaller cap, more buckets"
assert close(s["bf16"]["test_loss"], s["single"]["test_loss"], 1e-2)
for r in (0, 1):
    t = json.load(open(f"{d}/trace.rank{r}.json"))["traceEvents"]
    names = [e["name"] for e in t if e.get("ph") == "X"]
    assert any(n.startswith("allreduce bucket") for n in names), "no bucket spans"
    assert any(n.startswith("backward fc") for n in names) and any(n == "optimizer step" for n in names)
print("modes ok")
PY
finish
