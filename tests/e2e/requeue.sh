# Stopping to be resumed (docs/reference.md, "Stopping to be resumed"): SIGUSR1 makes a
# run finish its step, write a checkpoint and exit 75; the run resumed from it with
# --resume auto ends bit-identical to an uninterrupted one. No sleep and no timing: the
# stopped run writes a log line per step into a pipe that this script reads up to step
# 20 and then leaves unread while it sends the signal. The run's remaining lines fill
# the pipe (64 KiB, a few hundred lines) long before its last step, so it cannot end
# before the signal arrives; the script then reads the rest. Usage:
# requeue.sh BIN_DIR CASE
#   launcher   DDP (shm) under tandemrun; SIGUSR1 to tandemrun, which passes it on
#   one-rank   DDP (shm) under tandemrun; SIGUSR1 to rank 1's process only: the ranks
#              agree, so both stop at the same step and tandemrun exits 75
#   single     --mode single alone; also: no --checkpoint-dir (exit 1, the flag named),
#              a bad SLURM_RESTART_COUNT (exit 2)
source "$(dirname "$0")/lib.sh"
CASE="$2"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
C="$BIN/tandem-ckpt"
# 2000 steps of a 0.1M-parameter MLP; a stopped run logs every step (about 150 bytes).
STEPS=2000
JOB=(--data synthetic --synthetic-train 4096 --synthetic-test 512 --model mlp --hidden 128 --batch-size 16
     --lr 0.02 --no-progress --threads 1 --epochs 100 --max-steps "$STEPS")

# start NAME CMD...: runs CMD in the background, output in $TMP/NAME.log, pid in $pid.
start() {
  local name="$1"; shift
  "$@" > "$TMP/$name.log" 2>&1 &
  pid=$!
}

# start_piped NAME CMD...: the same, its output into a pipe this script reads (fd $out).
start_piped() {
  local name="$1"; shift
  mkfifo "$TMP/$name.fifo"
  "$@" --log-every 1 > "$TMP/$name.fifo" 2>&1 &
  pid=$!
  exec {out}< "$TMP/$name.fifo"
}

# underway NAME: reads the run's output (into its log) up to its line of step 20.
underway() {
  local line
  while IFS= read -r -u "$out" line; do
    printf '%s\n' "$line" >> "$TMP/$1.log"
    [[ "$line" == *"step 20/$STEPS "* ]] && return 0
  done
  echo "FAIL: $1 ended before logging step 20"; tail -20 "$TMP/$1.log"; FAILED=1
}

# drain NAME: reads the rest of the run's output into its log.
drain() {
  cat <&"$out" >> "$TMP/$1.log"
  exec {out}<&-
}

# worker_pid RANK: the pid of tandemrun $pid's worker holding RANK.
worker_pid() {
  local child
  for child in $(pgrep -P "$pid"); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "RANK=$1"; then echo "$child"; return; fi
  done
}

exits() {  # exits NAME CODE: the run $pid ended with CODE
  wait "$pid"; local rc=$?
  if [ "$rc" -eq "$2" ]; then echo "ok: $1 exited $rc"; else
    echo "FAIL: $1 exited $rc, expected $2"; tail -25 "$TMP/$1.log"; FAILED=1; fi
}

has() {  # has NAME TEXT
  if grep -qF -- "$2" "$TMP/$1.log"; then echo "ok: '$2'"; else
    echo "FAIL: output of $1 lacks '$2'. Output:"; tail -25 "$TMP/$1.log"; FAILED=1; fi
}

# stopped NAME CKDIR: the summary says SIGUSR1 stopped it before the end, at the step of
# the newest checkpoint, which verifies; prints that step.
stopped() {
  python3 - "$TMP/$1.json" "$2" "$STEPS" <<'EOF' || FAILED=1
import json, os, sys
s = json.load(open(sys.argv[1]))
cks = sorted(d for d in os.listdir(sys.argv[2]) if d.startswith("step-"))
if s["stopped_by"] != "SIGUSR1":
    sys.exit(f"FAIL: stopped_by {s['stopped_by']!r}, expected 'SIGUSR1'")
if not cks or int(cks[-1][5:]) != s["steps"] or not 0 < s["steps"] < int(sys.argv[3]):
    sys.exit(f"FAIL: stopped at step {s['steps']} of {sys.argv[3]}, newest checkpoint {cks[-1:]}")
print(f"ok: stopped_by SIGUSR1 at step {s['steps']}, checkpoint {cks[-1]}")
EOF
  local ck
  ck="$(ls -d "$2"/step-* | tail -1)"
  if "$C" verify "$ck" >/dev/null 2>&1; then echo "ok: $ck verifies"; else echo "FAIL: $ck does not verify"; FAILED=1; fi
}

# same_end NAME REF STEP: the resumed run NAME ends with REF's parameters, resumed from STEP
# of the stopped run, with the restart counters it was given.
same_end() {
  python3 - "$TMP/$1.json" "$TMP/$2.json" "$TMP/$3.json" <<'EOF' || FAILED=1
import json, sys
r, ref, stop = (json.load(open(p)) for p in sys.argv[1:])
if r["param_checksum"] != ref["param_checksum"]:
    sys.exit(f"FAIL: resumed run ends at {r['param_checksum']}, uninterrupted at {ref['param_checksum']}")
if r["resumed_from_step"] != stop["steps"] or r["stopped_by"] is not None or ref["resumed_from_step"] is not None:
    sys.exit(f"FAIL: resumed_from_step {r['resumed_from_step']} (stopped at {stop['steps']}), "
             f"stopped_by {r['stopped_by']!r}, reference resumed_from_step {ref['resumed_from_step']}")
if (r["restart_count"], r["slurm_restart_count"], ref["slurm_restart_count"]) != (0, 1, 0):
    sys.exit(f"FAIL: restart_count {r['restart_count']}, slurm_restart_count {r['slurm_restart_count']} "
             f"(reference {ref['slurm_restart_count']})")
print("ok: resumed from step", stop["steps"], "to the uninterrupted run's parameters", ref["param_checksum"])
EOF
}

# ddp NAME BACKEND TARGET: the DDP case, SIGUSR1 to tandemrun (TARGET launcher) or rank 1.
ddp() {
  local name="$1" backend="$2" target="$3"
  local launch=("$RUN" --nproc-per-node 2 --master-port 0 --grace-s 2 -- "$T" "${JOB[@]}" --mode ddp --backend "$backend")
  start "$name-ref" "${launch[@]}" --summary-json "$TMP/$name-ref.json"
  exits "$name-ref" 0
  start_piped "$name" "${launch[@]}" --checkpoint-dir "$TMP/$name-ck" --summary-json "$TMP/$name.json"
  underway "$name"
  if [ "$target" = launcher ]; then kill -USR1 "$pid"; else kill -USR1 "$(worker_pid 1)"; fi
  drain "$name"
  exits "$name" 75
  has "$name" "SIGUSR1 received: checkpoint at step"
  has "$name" "exiting 75 to be requeued (resume with --resume auto)"
  has "$name" "the job stopped to be resumed: every rank exited 75"
  if [ "$target" = launcher ]; then has "$name" "received SIGUSR1: passing it on to the workers"
  else has "$name" "SIGUSR1 seen by rank(s) 1 of 2 by the end of step"; fi
  stopped "$name" "$TMP/$name-ck"
  SLURM_RESTART_COUNT=1 start "$name-resumed" "${launch[@]}" --checkpoint-dir "$TMP/$name-ck" --resume auto \
    --summary-json "$TMP/$name-resumed.json"
  exits "$name-resumed" 0
  same_end "$name-resumed" "$name-ref" "$name"
}

case "$CASE" in
  launcher) ddp launcher shm launcher ;;
  one-rank) ddp one-rank shm rank1 ;;
  single)
    start ref "$T" "${JOB[@]}" --mode single --summary-json "$TMP/ref.json"
    exits ref 0
    start_piped st "$T" "${JOB[@]}" --mode single --checkpoint-dir "$TMP/ck" --summary-json "$TMP/st.json"
    underway st
    kill -USR1 "$pid"
    drain st
    exits st 75
    has st "SIGUSR1 received: checkpoint at step"
    stopped st "$TMP/ck"
    SLURM_RESTART_COUNT=1 start res "$T" "${JOB[@]}" --mode single --checkpoint-dir "$TMP/ck" --resume auto \
      --summary-json "$TMP/res.json"
    exits res 0
    same_end res ref st
    start_piped nock "$T" "${JOB[@]}" --mode single
    underway nock
    kill -USR1 "$pid"
    drain nock
    exits nock 1
    has nock "but there is no --checkpoint-dir: nothing was saved"
    SLURM_RESTART_COUNT=two expect 2 "environment variable SLURM_RESTART_COUNT='two' is not an integer" -- \
      "$T" "${JOB[@]}" --mode single
    ;;
  *) echo "unknown case $CASE"; exit 2 ;;
esac
finish
