#!/usr/bin/env bash
# Requeue end to end in the test cluster (slurm_lib.sh): a job of examples/slurm/
# srun-per-task.sbatch (2 nodes x 2 tasks) gets `scancel --signal=USR1`, as Slurm's
# `--signal=USR1@90` would send it before the time limit; its tasks finish their step,
# write a checkpoint and exit 75; the script requeues the job; the requeued run resumes
# with --resume auto and must end with the param_checksum of the same job run without
# interruption, its summary counting the requeue (slurm_restart_count 1).
# No sleep and no timing: rank 0 of the first run writes its output into a pipe this
# script reads up to step 20 and then leaves unread while it sends the signal, so the run
# (300 steps, a line of about 150 bytes each; the pipe holds 4 KiB) blocks on it long
# before its end; the script then reads on.
# Usage: requeue.sh BIN_DIR. Skips (exit 0, "SKIP: ...") where the cluster cannot start.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/slurm_lib.sh"
slurm_test_begin "${1:-}" tandem-train
STEPS=300
TRAIN_ARGS=(--backend gloo --max-steps "$STEPS" --epochs 100 --seed 7 --synthetic-train 4096 --synthetic-test 512
            --hidden 128 --batch-size 16 --lr 0.02 --no-progress --log-every 1 --collective-timeout-s 120)
SCRIPT="$HERE/../../examples/slurm/srun-per-task.sbatch"

# Reference: the same batch script, not interrupted.
export PATH="$BIN:$PATH"
on_ctl timeout 300 sbatch --wait --quiet --chdir "$D" --output "$D/reference-%j.out" \
  --export "ALL,TANDEM_CHECKPOINT_DIR=$D/reference-ckpt" "$SCRIPT" "${TRAIN_ARGS[@]}" --summary-json "$D/reference.json" ||
  { slurm_fail "the reference job failed"; tail -20 "$D"/reference-*.out; }

# The gate: rank 0 of the job's first run (SLURM_RESTART_COUNT unset) writes into $GATE.
mkdir -p "$D/gated"
cat >"$D/gated/tandem-train" <<'GATED'
#!/usr/bin/env bash
if [ -z "${SLURM_RESTART_COUNT:-}" ] && [ "$SLURM_PROCID" = 0 ]; then exec "$BIN/tandem-train" "$@" >"$GATE" 2>&1; fi
exec "$BIN/tandem-train" "$@"
GATED
chmod +x "$D/gated/tandem-train"
mkfifo "$D/gate"
# Opened read-write, so that this open does not wait for the writer (and never sees EOF).
# The pipe is cut to one page (4 KiB, about 27 step lines), so the run blocks within 30
# steps of the last line read, far before its end.
exec {gate}<>"$D/gate"
python3 -c 'import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ' \
  "$D/gate" || slurm_fail "cannot cut the pipe to 4 KiB"
export BIN GATE="$D/gate"
job="$(PATH="$D/gated:$PATH" on_ctl timeout 60 sbatch --parsable --chdir "$D" --output "$D/requeue.out" \
  --export "ALL,TANDEM_CHECKPOINT_DIR=$D/ckpt" "$SCRIPT" "${TRAIN_ARGS[@]}" --summary-json "$D/requeue.json")" ||
  { slurm_fail "sbatch refused the job"; slurm_done; }
underway=0
while IFS= read -r -t 120 -u "$gate" line; do
  printf '%s\n' "$line" >>"$D/rank0-first.log"
  [[ "$line" == *"step 20/$STEPS "* ]] && { underway=1; break; }
done
[ "$underway" = 1 ] || { slurm_fail "the job's rank 0 did not log step 20"; tail -20 "$D/rank0-first.log" "$D/requeue.out"; }
on_ctl scancel --signal=USR1 "$job" || slurm_fail "scancel --signal=USR1 $job failed"
cat <&"$gate" >>"$D/rank0-first.log" &
reader=$!
# The job leaves the queue after its requeued run.
job_gone() { [ -z "$(on_ctl squeue -h -j "$job" 2>/dev/null)" ]; }
poll_until 300 job_gone || slurm_fail "job $job is still in the queue: $(on_ctl squeue -h -j "$job")"
kill "$reader" 2>/dev/null
wait "$reader" 2>/dev/null
exec {gate}>&-

grep -q "exiting 75 to be requeued" "$D/rank0-first.log" ||
  { slurm_fail "the first run's rank 0 did not stop to be resumed"; tail -20 "$D/rank0-first.log"; }
grep -q "requeueing job $job" "$D/requeue.out" || slurm_fail "the batch script did not requeue job $job"
grep -q "tandem flight recorder" "$D/requeue.out" "$D/rank0-first.log" &&
  slurm_fail "SIGUSR1 made a rank dump its flight recorder (only SIGUSR2 should)"
same_params "a job stopped by SIGUSR1, requeued and resumed" "$D/reference.json" "$D/requeue.json"
got="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["stopped_by"], d["slurm_restart_count"], 0 < (d["resumed_from_step"] or 0) < d["steps"])' "$D/requeue.json" 2>&1)"
[ "$got" = "None 1 True" ] && echo "ok: the resumed run's summary: stopped_by null, slurm_restart_count 1, resumed_from_step $(summary_field "$D/requeue.json" resumed_from_step)" ||
  slurm_fail "the resumed run's summary: stopped_by, slurm_restart_count, resumed inside the run: $got"
# Information, not a check: how long Slurm kept the requeued job waiting.
python3 - "$D/slurmctld.log" "$job" <<'PY'
import re, sys
from datetime import datetime
t = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[(\S+)\] (Requeuing|sched: Allocate) JobId=" + sys.argv[2] + r"\b", line)
    if m:
        t.setdefault(m.group(2), []).append(datetime.fromisoformat(m.group(1)))
if "Requeuing" in t and len(t.get("sched: Allocate", [])) > 1:
    print(f"(information: requeued to started again {(t['sched: Allocate'][1] - t['Requeuing'][0]).total_seconds():.1f} s)")
PY
if [ "$SLURM_FAILED" != 0 ]; then
  echo "--- the job's output, less its step lines:"
  grep -v ' info step [0-9]' "$D/requeue.out" | tail -40
  echo "--- slurmctld.log:"
  grep -i "JobId=$job\b" "$D/slurmctld.log" | tail -20
fi
slurm_done
