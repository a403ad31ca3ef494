# Checkpoints end to end, through the real programs:
#  1. a DDP(2) job under tandemrun --max-restarts 1 whose rank 1 is killed with SIGKILL
#     after a checkpoint exists restarts, resumes (--resume auto) and ends bit-identical
#     to the same job never interrupted;
#  2. the checkpoint a DDP(4) job wrote loads in single, DP(2) and DDP(2), and all give
#     the same test loss (resumed at --max-steps: no step, one evaluation);
#  3. one written by DP(2) loads in DDP(3);
#  4. a corrupted newest checkpoint is reported and the previous one used;
#  5. a checkpoint of another shape is refused naming the first differing tensor.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
C="$BIN/tandem-ckpt"
SPAWN="$(dirname "$0")/../ddp/spawn_local.sh"
COMMON=(--data synthetic --synthetic-train 4096 --synthetic-test 1024 --model mlp --hidden 64 --batch-size 16
        --lr 0.02 --no-progress --threads 1 --epochs 100)

# 1. Interrupted and resumed == uninterrupted. STEPS keeps the job running for a few
# seconds even on the shm backend (about 0.2 ms a step), so the kill below lands mid-run.
STEPS=8000
expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp --max-steps $STEPS \
  --checkpoint-dir "$TMP/ref" --save-every 20 --summary-json "$TMP/ref.json"
"$RUN" --nproc-per-node 2 --master-port 0 --max-restarts 1 -- "$T" "${COMMON[@]}" --mode ddp --max-steps $STEPS \
  --checkpoint-dir "$TMP/killed" --save-every 20 --resume auto --summary-json "$TMP/killed.json" \
  > "$TMP/killed.log" 2>&1 &
LAUNCHER=$!
victim=""
for _ in $(seq 1 3000); do  # bounded wait (60 s) for the first checkpoint, then kill rank 1
  if compgen -G "$TMP/killed/step-*" >/dev/null; then  # a checkpoint exists (older ones are pruned)
    victim="$(pgrep -f -- "--checkpoint-dir $TMP/killed" | while read -r p; do
      if tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx 'RANK=1'; then echo "$p"; fi; done | head -1)"
    [ -n "$victim" ] && kill -9 "$victim" && break
  fi
  if ! kill -0 "$LAUNCHER" 2>/dev/null; then break; fi
  sleep 0.02
done
wait "$LAUNCHER"; rc=$?
if [ -z "$victim" ]; then echo "FAIL: never found rank 1 to kill"; FAILED=1; fi
if [ "$rc" -ne 0 ]; then echo "FAIL: restarted job exited $rc"; tail -20 "$TMP/killed.log"; FAILED=1; fi
expect 0 "attempt" -- grep -i "attempt" "$TMP/killed.log"
expect 0 "resum" -- grep -i "resum" "$TMP/killed.log"
expect 0 "same checksum" -- python3 - "$TMP/ref.json" "$TMP/killed.json" "$STEPS" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["steps"] == b["steps"] == int(sys.argv[3]), (a["steps"], b["steps"])
assert a["param_checksum"] == b["param_checksum"], (a["param_checksum"], b["param_checksum"])
print("same checksum", a["param_checksum"])
PY

# 2. Written by DDP(4), loaded by single, DP(2), DDP(2): the same test loss.
expect 0 "done:" -- "$RUN" --nproc-per-node 4 --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp --max-steps 30 \
  --checkpoint-dir "$TMP/ddp4" --summary-json "$TMP/ddp4.json"
CK="$TMP/ddp4/step-00000030"
expect 0 "OK" -- "$C" verify "$CK"
expect 0 "done:" -- "$T" "${COMMON[@]}" --max-steps 30 --resume "$CK" --summary-json "$TMP/from4-single.json"
expect 0 "done:" -- "$T" "${COMMON[@]}" --mode dp --devices 2 --max-steps 30 --resume "$CK" \
  --summary-json "$TMP/from4-dp.json"
expect 0 "done:" -- bash "$SPAWN" 2 -- "$T" "${COMMON[@]}" --mode ddp --max-steps 30 --resume "$CK" \
  --summary-json "$TMP/from4-ddp2.json"

# 3. Written by DP(2), loaded by DDP(3).
expect 0 "done:" -- "$T" "${COMMON[@]}" --mode dp --devices 2 --max-steps 12 --checkpoint-dir "$TMP/dp2" \
  --summary-json "$TMP/dp2.json"
expect 0 "done:" -- bash "$SPAWN" 3 -- "$T" "${COMMON[@]}" --mode ddp --max-steps 12 \
  --resume "$TMP/dp2/step-00000012" --summary-json "$TMP/from-dp2-ddp3.json"
expect 0 "modes agree" -- python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
ref = json.load(open(f"{d}/ddp4.json"))
for k in ("from4-single", "from4-dp", "from4-ddp2"):
    s = json.load(open(f"{d}/{k}.json"))
    assert s["param_checksum"] == ref["param_checksum"], (k, s["param_checksum"], ref["param_checksum"])
    assert abs(s["test_loss"] - ref["test_loss"]) <= 1e-6 * abs(ref["test_loss"]), (k, s["test_loss"], ref["test_loss"])
    assert s["final_train_loss"] is None, (k, "no step trained after a resume at --max-steps")
dp2, ddp3 = json.load(open(f"{d}/dp2.json")), json.load(open(f"{d}/from-dp2-ddp3.json"))
assert dp2["param_checksum"] == ddp3["param_checksum"] and ddp3["world_size"] == 3
print("modes agree", ref["test_loss"])
PY

# 4. A corrupted newest checkpoint: reported, and the previous one used.
expect 0 "done:" -- "$T" "${COMMON[@]}" --max-steps 20 --save-every 10 --checkpoint-dir "$TMP/corrupt" \
  --summary-json "$TMP/c.json"
python3 - "$TMP/corrupt/step-00000020/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read()); b[-5] ^= 0xFF; open(p, "wb").write(b)
PY
expect 1 "model.safetensors" -- "$C" verify "$TMP/corrupt/step-00000020"
expect 0 "step-00000020 is not usable" -- "$T" "${COMMON[@]}" --max-steps 20 --resume auto \
  --checkpoint-dir "$TMP/corrupt/" --summary-json "$TMP/c2.json"
expect 0 "loaded $TMP/corrupt/step-00000010" -- "$T" "${COMMON[@]}" --max-steps 20 --resume "$TMP/corrupt/step-00000010" \
  --summary-json "$TMP/c3.json"
expect 0 "resumed run equals" -- python3 - "$TMP/c.json" "$TMP/c2.json" "$TMP/c3.json" <<'PY'
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
assert a["param_checksum"] == b["param_checksum"] == c["param_checksum"]
print("resumed run equals the uninterrupted one")
PY

# 5. Another model's checkpoint is refused, naming the tensor.
expect 1 "fc1.weight" -- "$T" "${COMMON[@]}" --hidden 32 --max-steps 20 --resume "$TMP/corrupt/step-00000010"
expect 1 "does-not-exist" -- "$T" "${COMMON[@]}" --max-steps 20 --resume "$TMP/does-not-exist"
finish
