#!/usr/bin/env bash
# Requeue end to end in the test cluster (slurm_lib.sh), for both batch scripts of
# examples/slurm/ (2 nodes x 2 replicas): a job gets `scancel --signal=USR1`, as Slurm's
# `--signal=USR1@90` would send it before the time limit; its replicas (through tandemrun,
# which passes the signal on, in the per-node layout) finish their step, write a checkpoint
# and exit 75; the script requeues the job; the requeued run resumes with --resume auto
# and must end with the param_checksum of the same job run without interruption, its
# summary counting the requeue (slurm_restart_count 1).
# No sleep and no timing: rank 0 of the first run writes its output into a pipe this
# script reads up to step 20 and then leaves unread while it sends the signal, so the run
# (300 steps, a line of about 150 bytes each; the pipe holds 4 KiB) blocks on it long
# before its end; the script then reads on.
# Usage: requeue.sh BIN_DIR. Skips (exit 0, "SKIP: ...") where the cluster cannot start.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/slurm_lib.sh"
slurm_test_begin "${1:-}" tandem-train tandemrun
STEPS=300
TRAIN_ARGS=(--backend gloo --max-steps "$STEPS" --epochs 100 --seed 7 --synthetic-train 4096 --synthetic-test 512
            --hidden 128 --batch-size 16 --lr 0.02 --no-progress --log-every 1 --collective-timeout-s 120)
EXAMPLES="$HERE/../../examples/slurm"

# Reference: the one-task-per-replica script, not interrupted (both layouts train to the
# same parameters: slurm.layouts).
export PATH="$BIN:$PATH" TANDEM_SECRET_DIR="$D"
on_ctl timeout 300 sbatch --wait --quiet --chdir "$D" --output "$D/reference-%j.out" \
  --export "ALL,TANDEM_CHECKPOINT_DIR=$D/reference-ckpt" "$EXAMPLES/srun-per-task.sbatch" "${TRAIN_ARGS[@]}" \
  --summary-json "$D/reference.json" || { slurm_fail "the reference job failed"; tail -20 "$D"/reference-*.out; }

# The gate: rank 0 of the job's first run (SLURM_RESTART_COUNT unset) writes into $GATE;
# its rank is tandemrun's RANK, or srun's SLURM_PROCID without tandemrun.
mkdir -p "$D/gated"
cat >"$D/gated/tandem-train" <<'GATED'
#!/usr/bin/env bash
if [ -z "${SLURM_RESTART_COUNT:-}" ] && [ "${RANK:-$SLURM_PROCID}" = 0 ]; then
  exec "$BIN/tandem-train" "$@" >"$GATE" 2>&1
fi
exec "$BIN/tandem-train" "$@"
GATED
chmod +x "$D/gated/tandem-train"
export BIN

# stop_requeue_resume NAME SCRIPT: submits SCRIPT (tandem-train gated), signals it after
# step 20, and checks the stop, the requeue and the resumed run against the reference.
stop_requeue_resume() {
  local name="$1" script="$2" job line underway=0 reader got
  export GATE="$D/$name.gate"
  mkfifo "$GATE"
  # Opened read-write, so that this open does not wait for the writer (and never sees
  # EOF). The pipe is cut to one page (4 KiB, about 27 step lines), so the run blocks
  # within 30 steps of the last line read, far before its end.
  exec {gate}<>"$GATE"
  python3 -c 'import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ' \
    "$GATE" || slurm_fail "$name: cannot cut the pipe to 4 KiB"
  job="$(PATH="$D/gated:$PATH" on_ctl timeout 60 sbatch --parsable --chdir "$D" --output "$D/$name.out" \
    --export "ALL,TANDEM_CHECKPOINT_DIR=$D/$name-ckpt" "$script" "${TRAIN_ARGS[@]}" --summary-json "$D/$name.json")" ||
    { slurm_fail "$name: sbatch refused the job"; return; }
  while IFS= read -r -t 120 -u "$gate" line; do
    printf '%s\n' "$line" >>"$D/$name-rank0-first.log"
    [[ "$line" == *"step 20/$STEPS "* ]] && { underway=1; break; }
  done
  [ "$underway" = 1 ] ||
    { slurm_fail "$name: the job's rank 0 did not log step 20"; tail -20 "$D/$name-rank0-first.log" "$D/$name.out"; }
  on_ctl scancel --signal=USR1 "$job" || slurm_fail "$name: scancel --signal=USR1 $job failed"
  cat <&"$gate" >>"$D/$name-rank0-first.log" &
  reader=$!
  # The job leaves the queue after its requeued run.
  job_gone() { [ -z "$(on_ctl squeue -h -j "$job" 2>/dev/null)" ]; }
  poll_until 300 job_gone || slurm_fail "$name: job $job is still in the queue: $(on_ctl squeue -h -j "$job")"
  kill "$reader" 2>/dev/null
  wait "$reader" 2>/dev/null
  exec {gate}>&-

  grep -q "exiting 75 to be requeued" "$D/$name-rank0-first.log" ||
    { slurm_fail "$name: the first run's rank 0 did not stop to be resumed"; tail -20 "$D/$name-rank0-first.log"; }
  grep -q "requeueing job $job" "$D/$name.out" || slurm_fail "$name: the batch script did not requeue job $job"
  grep -q "tandem flight recorder" "$D/$name.out" "$D/$name-rank0-first.log" &&
    slurm_fail "$name: SIGUSR1 made a rank dump its flight recorder (only SIGUSR2 should)"
  same_params "$name: a job stopped by SIGUSR1, requeued and resumed" "$D/reference.json" "$D/$name.json"
  got="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["stopped_by"], d["slurm_restart_count"], 0 < (d["resumed_from_step"] or 0) < d["steps"])' "$D/$name.json" 2>&1)"
  if [ "$got" = "None 1 True" ]; then
    echo "ok: $name: the resumed run's summary: stopped_by null, slurm_restart_count 1," \
      "resumed_from_step $(summary_field "$D/$name.json" resumed_from_step)"
  else
    slurm_fail "$name: the resumed run's summary: stopped_by, slurm_restart_count, resumed inside the run: $got"
  fi
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
    echo "--- $name: the job's output, less its step lines:"
    grep -v ' info step [0-9]' "$D/$name.out" | tail -40
    echo "--- slurmctld.log:"
    grep -i "JobId=$job\b" "$D/slurmctld.log" | tail -20
  fi
}

stop_requeue_resume tasks "$EXAMPLES/srun-per-task.sbatch"
stop_requeue_resume tandemrun "$EXAMPLES/tandemrun-per-node.sbatch"
slurm_done
