# Faults injected into a real DDP job under tandemrun (TANDEM_FAULT, see
# collectives/fault_injection.h; docs/failures.md shows each message). For each: the job
# ends (the test's own timeout bounds it), the message names the right rank and what
# happened to it, no process of the job is left, and every checkpoint written before
# the fault still verifies. Usage: faults.sh BIN_DIR CASE [BACKEND]
#   stop-before    rank 1 stops (SIGSTOP) before an all-reduce
#   stop-inside    rank 1 stops inside an all-reduce
#   kill-inside    rank 1 dies (SIGKILL) inside it
#   hang           rank 1 stops stepping without exiting; --hang-timeout-s finds it,
#                  every responding rank dumps its flight recorder, one analysis is printed
#   hang-frozen    rank 1 stops inside an all-reduce, seen by --hang-timeout-s
#   hang-restart   the hang with --max-restarts 1: the job resumes from its last
#                  checkpoint and ends bit-identical to an uninterrupted run
source "$(dirname "$0")/lib.sh"
CASE="$2"
BACKEND="${3:-gloo}"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
C="$BIN/tandem-ckpt"
# hidden 512 (0.67M parameters, two gradient buckets), a checkpoint every 10 steps; op #60
# lands around step 30.
JOB=(--data synthetic --synthetic-train 4096 --synthetic-test 512 --model mlp --hidden 512 --batch-size 16
     --lr 0.02 --no-progress --threads 1 --epochs 100 --mode ddp --backend "$BACKEND" --save-every 10)
export TANDEM_HEARTBEAT_MS=250

# run OUT_NAME EXTRA_LAUNCHER_FLAGS... -- EXTRA_TRAIN_FLAGS...: runs the job, leaves its
# output in $TMP/OUT_NAME.log and its exit code in $rc.
run() {
  local name="$1"; shift
  local lflags=()
  while [ "$1" != "--" ]; do lflags+=("$1"); shift; done
  shift
  "$RUN" --nproc-per-node 2 --master-port 0 --grace-s 2 --log-dir "$TMP/$name-logs" "${lflags[@]}" -- \
    "$T" "${JOB[@]}" --checkpoint-dir "$TMP/$name-ck" "$@" > "$TMP/$name.log" 2>&1
  rc=$?
}

has() {  # has NAME TEXT: the run's output contains TEXT
  if grep -qF -- "$2" "$TMP/$1.log"; then echo "ok: '$2'"; else
    echo "FAIL: output of $1 lacks '$2'. Output:"; tail -25 "$TMP/$1.log"; FAILED=1; fi
}

# The peer's timeout is either the caller's wait (the op "did not complete within") or the
# engine's own deadline inside the op ("failed ...: <engine> timed out"), whichever of
# the two 4 s clocks started first; both name the stopped rank by node and pid.
has_timeout() {  # has_timeout NAME
  local re="(did not complete within 4000 ms|failed) on rank 0 of 2 \($BACKEND\): (.* timed out.*; )?rank 1 \(node 0, pid"
  if grep -qiE -- "$re" "$TMP/$1.log"; then echo "ok: /$re/"; else
    echo "FAIL: output of $1 lacks /$re/. Output:"; tail -25 "$TMP/$1.log"; FAILED=1; fi
}

after() {  # after NAME CODE: exit code, no process left, checkpoints intact
  local name="$1" code="$2"
  if [ "$rc" -ne "$code" ]; then echo "FAIL: $name exited $rc, expected $code"; tail -25 "$TMP/$name.log"; FAILED=1; fi
  if pgrep -f -- "$TMP/$name-ck" >/dev/null; then
    echo "FAIL: processes of $name left behind:"; pgrep -af -- "$TMP/$name-ck"; FAILED=1
    pkill -9 -f -- "$TMP/$name-ck"
  else
    echo "ok: no process of $name left"
  fi
  local n=0
  for ck in "$TMP/$name-ck"/step-*; do
    [ -d "$ck" ] || continue
    n=$((n + 1))
    if ! "$C" verify "$ck" >/dev/null 2>&1; then echo "FAIL: checkpoint $ck does not verify"; FAILED=1; fi
  done
  if [ "$n" -eq 0 ]; then echo "FAIL: $name wrote no checkpoint before the fault"; FAILED=1; else echo "ok: $n checkpoint(s) verify"; fi
}

flight_dump_ok() {  # flight_dump_ok NAME RANK: the rank's dump is valid JSON with entries, mode 0600
  local f="$TMP/$1-logs/attempt0/flight-rank$2.json"
  if python3 -c "import json,os,sys; d=json.load(open(sys.argv[1])); assert d['format']=='tandem-flight-recorder' and d['rank']==int(sys.argv[2]) and d['entries'] and os.stat(sys.argv[1]).st_mode & 0o777 == 0o600" "$f" "$2"; then
    echo "ok: $f"
  else
    echo "FAIL: no valid flight recorder at $f"; ls -R "$TMP/$1-logs"; FAILED=1
  fi
}

case "$CASE" in
  stop-before)
    TANDEM_FAULT=stop-before:60 TANDEM_FAULT_RANK=1 run sb -- --collective-timeout-s 4 --max-steps 100000
    after sb 1
    has sb "fault injection (stop-before:60 on rank 1)"
    has_timeout sb
    has sb "stopped responding before reaching it (no heartbeat for"
    has sb "its last collective is #59); rank 0 is waiting in it"
    flight_dump_ok sb 0
    ;;
  stop-inside)
    TANDEM_FAULT=stop-inside:60 TANDEM_FAULT_RANK=1 run si -- --collective-timeout-s 4 --max-steps 100000
    after si 1
    has_timeout si
    has si "entered it and then stopped responding (no heartbeat for"
    has si "); rank 0 is waiting in it"
    flight_dump_ok si 0
    ;;
  kill-inside)
    TANDEM_FAULT=kill-inside:60 TANDEM_FAULT_RANK=1 run ki -- --collective-timeout-s 30 --max-steps 100000
    after ki 1
    has ki "fault injection (kill-inside:60 on rank 1)"
    has ki "job failed: rank 1 (node 0"
    has ki "was killed by signal 9 (SIGKILL"
    ;;
  hang)
    TANDEM_FAULT=hang-at-step:25 TANDEM_FAULT_RANK=1 run hg --hang-timeout-s 3 -- --collective-timeout-s 600 \
      --max-steps 100000
    after hg 1
    has hg "stops stepping after step 25 without exiting"
    has hg "no rank completed a training step for"
    has hg "(--hang-timeout-s 3): rank 1 is alive but not in a collective: it stopped after step 25"
    has hg "rank 0 wait in allreduce #"
    has hg "first divergence: none (flight recorders of ranks 0, 1)"
    flight_dump_ok hg 0
    flight_dump_ok hg 1
    ;;
  hang-frozen)
    TANDEM_FAULT=stop-inside:60 TANDEM_FAULT_RANK=1 run hf --hang-timeout-s 3 -- --collective-timeout-s 600 \
      --max-steps 100000
    after hf 1
    has hf "(--hang-timeout-s 3): rank 1 stuck in allreduce #60 for"
    has hf "stopped or frozen); rank 0 wait in allreduce #60 for"
    has hf "first divergence: none (flight recorders of rank 0)"
    ;;
  hang-restart)
    run ref -- --max-steps 120 --summary-json "$TMP/ref.json"
    if [ "$rc" -ne 0 ]; then echo "FAIL: reference run exited $rc"; tail -20 "$TMP/ref.log"; FAILED=1; fi
    TANDEM_FAULT=hang-at-step:25 TANDEM_FAULT_RANK=1 TANDEM_FAULT_ATTEMPT=0 run hr --hang-timeout-s 3 \
      --max-restarts 1 -- --collective-timeout-s 600 --max-steps 120 --resume auto --summary-json "$TMP/hr.json"
    after hr 0
    has hr "attempt 0 failed: no rank completed a training step for"
    has hr "restarting the whole job"
    has hr "checkpoint: loaded"
    python3 - "$TMP/ref.json" "$TMP/hr.json" <<'EOF' || FAILED=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
if a["param_checksum"] != b["param_checksum"]:
    sys.exit(f"FAIL: restarted run ends at {b['param_checksum']}, uninterrupted at {a['param_checksum']}")
print("ok: same parameters as the uninterrupted run:", a["param_checksum"])
EOF
    ;;
  *) echo "unknown case $CASE"; exit 2 ;;
esac
finish
