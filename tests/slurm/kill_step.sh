#!/usr/bin/env bash
# A 2-node x 2-replica step (slurm_lib.sh's test cluster) must end whole, with no process
# left on either node, and the killed rank named, when
#   kill_one     one worker of the tandemrun-per-node layout gets SIGKILL,
#   kill_task    one task of the srun-per-replica layout gets SIGKILL (KillOnBadExit
#                ends the step), or
#   scancel      the tandemrun layout's step gets `scancel --signal=KILL JOB.0`.
# Every task and worker writes its pid before it execs; after the job has left the
# queue, none of those pids may be alive, and no process of the cluster but its daemons.
# Usage: kill_step.sh BIN_DIR. Skips (exit 0, "SKIP: ...") where the cluster cannot start.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/slurm_lib.sh"
slurm_test_begin "${1:-}" tandem-train tandemrun
export BIN

# start_step CASE LAYOUT: a 2-node step in the background whose training would run for
# hours, as one tandemrun per node (LAYOUT tandemrun: 2 tandemruns, 4 workers) or one
# srun task per replica (LAYOUT tasks: 4 tandem-trains); pid files in $D/CASE/
# (tandemrun-NODE, worker-RANK).
start_step() {
  mkdir -p "$D/$1"
  export PIDS="$D/$1"
  if [ "$2" = tandemrun ]; then
    expected=6
    on_ctl timeout 300 srun -N2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '
      echo $$ >"$PIDS/tandemrun-$SLURM_NODEID"
      exec "$BIN/tandemrun" --nproc-per-node 2 -- "$D/train.sh"' >"$D/$1.out" 2>&1 &
  else
    expected=4
    on_ctl timeout 300 srun -N2 --ntasks-per-node=2 --kill-on-bad-exit=1 "$D/train.sh" >"$D/$1.out" 2>&1 &
  fi
  STEP_PID=$!
  all_pids_written() { [ "$(ls "$PIDS" | wc -l)" = "$expected" ]; }
  poll_until 120 all_pids_written || slurm_fail "$1: the step did not start its $expected processes"
}
# A replica: its pid under its rank (tandemrun's RANK, else srun's SLURM_PROCID), then
# tandem-train in its place.
export D
cat >"$D/train.sh" <<'EOF'
#!/usr/bin/env bash
echo $$ >"$PIDS/worker-${RANK:-$SLURM_PROCID}"
exec "$BIN/tandem-train" --mode ddp --backend gloo --data synthetic --synthetic-train 4096 --synthetic-test 512 \
  --max-steps 1000000
EOF
chmod +x "$D/train.sh"

# The cluster's processes less its daemons (and slurmctld's slurmscriptd), compared with
# builtins only: a grep here would carry the cluster's SLURM_CONF itself.
other_processes() {
  local pid daemons
  daemons=" ${SLURM_PIDS[*]} $(pgrep -P "${SLURM_PIDS[1]}" | tr '\n' ' ') "
  for pid in $(slurm_leftovers); do [[ "$daemons" == *" $pid "* ]] || echo -n " $pid"; done
}
no_other_processes() { [ -z "$(other_processes)" ]; }

# end_step CASE: srun has returned and the job has left the queue; then every recorded
# pid must be gone, and every process of the cluster must be a daemon of its own.
end_step() {
  wait "$STEP_PID"
  local rc=$? pid alive=""
  [ "$rc" != 0 ] || slurm_fail "$1: srun exited 0 although its step was killed"
  poll_until 60 slurm_queue_empty || slurm_fail "$1: the job is still in the queue: $(on_ctl squeue -h)"
  # A killed process whose parent died first stays a zombie until init reaps it: it
  # has exited, so only a process not in state Z counts as alive.
  for pid in $(cat "$D/$1"/*); do
    [ -r "/proc/$pid/stat" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ] && alive+=" $pid"
  done
  # Then the cluster's other processes (each step's slurmstepd finishes shortly after
  # the job has left the queue) must end too.
  poll_until 60 no_other_processes
  local others
  others="$(other_processes)"
  if [ -n "$alive" ] || [ -n "$others" ]; then
    slurm_fail "$1: left behind: recorded pids${alive:- none}; other processes of the cluster:${others:- none}"
    [ -z "$alive$others" ] || ps -o pid=,ppid=,stat=,cmd= -p "$(echo $alive $others | tr ' ' ,)"
  else
    echo "ok: $1: srun exited $rc and none of the step's $2 processes is left"
  fi
}

# Whoever ends the step must say which rank died: tandemrun on every node, srun for its
# own tasks.
expect_named() {  # CASE PATTERN
  grep -q -- "$2" "$D/$1.out" && echo "ok: $1: the output names the killed rank: $(grep -m1 -o -- "$2" "$D/$1.out")" ||
    { slurm_fail "$1: no line names the killed rank ('$2')"; tail -15 "$D/$1.out"; }
}

start_step kill_one tandemrun
kill -KILL "$(cat "$D/kill_one/worker-3")"  # rank 3: node1's second worker
end_step kill_one 6
expect_named kill_one "job failed: rank 3 (node 1, host [^,]*, local rank 1, pid [0-9]*) was killed by signal 9"

start_step kill_task tasks
kill -KILL "$(cat "$D/kill_task/worker-3")"
end_step kill_task 4
expect_named kill_task "node1: task 3: Killed"

start_step scancel tandemrun
on_ctl scancel --signal=KILL "$(on_ctl squeue -h -o %i).0"
end_step scancel 6
slurm_done
