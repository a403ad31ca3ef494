# Direct launch under srun, without a cluster: tandem-train started by hand with the
# SLURM_* variables srun would give each task (collectives/slurm_env.h), on loopback.
# A 1-node x 2-task step rendezvouses and trains to the same param_checksum as
# `tandemrun --nproc-per-node 2`; a 2-"node" x 2-task step (both nodes this machine,
# told apart by SLURM_NODEID) picks hier and ends with identical replicas. Settings that
# disagree exit 2 naming the variable. No process waits on a sleep: each step's tasks are
# started together and `wait`ed for.
source "$(dirname "$0")/lib.sh"
MODEL=(--model mlp --data synthetic --synthetic-train 2048 --synthetic-test 256 --hidden 64 --max-steps 20
       --batch-size 32 --lr 0.05 --no-progress)
TRAIN=(--mode ddp "${MODEL[@]}" --threads 1)
# Nothing of an outer launcher may leak in (ctest under tandemrun, mpirun or srun).
CLEAN=(env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK -u MASTER_ADDR -u MASTER_PORT
       -u TANDEM_STORE_ADDR -u TANDEM_STORE_PORT -u TANDEM_STORE_HOSTED -u TANDEM_JOB_ID -u OMPI_COMM_WORLD_RANK
       -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_RANK -u SLURM_GPUS_ON_NODE -u CUDA_VISIBLE_DEVICES
       -u SLURM_STEP_NUM_TASKS -u SLURM_STEP_NUM_NODES -u SLURM_NNODES -u SLURM_NTASKS_PER_NODE
       -u SLURM_STEP_TASKS_PER_NODE -u SLURM_JOB_NODELIST)

# srun_vars RANK NODES PER_NODE: the variables of task RANK of a NODES x PER_NODE step.
JOB=$(( $$ % 100000 ))
srun_vars() {
  local rank=$1 nodes=$2 per=$3
  local layout="$per"; [ "$nodes" -gt 1 ] && layout="$per(x$nodes)"
  echo SLURM_JOB_ID=$JOB SLURM_STEP_ID=$nodes SLURM_PROCID=$rank SLURM_NTASKS=$((nodes * per)) \
    SLURM_LOCALID=$((rank % per)) SLURM_NODEID=$((rank / per)) SLURM_NNODES=$nodes SLURM_STEP_NUM_NODES=$nodes \
    SLURM_STEP_NUM_TASKS=$((nodes * per)) SLURM_NTASKS_PER_NODE=$per "SLURM_STEP_TASKS_PER_NODE=$layout" \
    SLURM_STEP_NODELIST=localhost SLURM_JOB_NODELIST=localhost
}

# step NODES PER_NODE SUMMARY: every task of the step, started together; fails unless all exit 0.
step() {
  local nodes=$1 per=$2 summary=$3 pids=() rc=0
  for ((r = 0; r < nodes * per; ++r)); do
    # shellcheck disable=SC2046  # srun_vars' words are the variables
    "${CLEAN[@]}" $(srun_vars $r "$nodes" "$per") "$BIN/tandem-train" "${TRAIN[@]}" --summary-json "$summary" \
      >"$TMP/step$nodes.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$TMP/step$nodes.0.log"
  return $rc
}

expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$BIN/tandem-train" "${TRAIN[@]}" \
  --summary-json "$TMP/tandemrun.json"
expect 0 "backend shm (auto: 2 ranks under Slurm, 1 node, 2 on this node, all on this node" -- step 1 2 "$TMP/srun1x2.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/srun1x2.json" --mode ddp --steps 20 \
  --replicas-identical --same-checksum "$TMP/tandemrun.json"
expect 0 "backend hier (auto: 4 ranks under Slurm, 2 nodes, 2 on this node, CPU tensors: shm within each node" -- \
  step 2 2 "$TMP/srun2x2.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/srun2x2.json" --mode ddp --steps 20 \
  --replicas-identical

# Threads: srun -c gives each task its cores; else the node's are shared among --ntasks-per-node.
threads() {  # threads VAR=VALUE...: the BLAS threads (--threads 0) of a task with these variables
  "${CLEAN[@]}" -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK "$@" \
    "$BIN/tandem-train" --mode single "${MODEL[@]}" --max-steps 1 --summary-json "$TMP/threads.json" >/dev/null 2>&1 &&
    python3 -c 'import json, sys; print("threads %d." % json.load(open(sys.argv[1]))["threads"])' "$TMP/threads.json"
}
expect 0 "threads 1." -- threads SLURM_CPUS_PER_TASK=1
expect 0 "threads $(python3 -c 'import os; print(max(1, os.cpu_count() // 2))')." -- threads SLURM_NTASKS_PER_NODE=2

# Disagreeing settings: exit 2, the variable named, before any rendezvous.
# one VAR=VALUE... [-- FLAG...]: task 1 of a 2 x 2 step with these changes and extra flags.
one() {
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  # shellcheck disable=SC2046
  "${CLEAN[@]}" $(srun_vars 1 2 2) "${vars[@]}" "$BIN/tandem-train" "${TRAIN[@]}" "$@"
}
expect 2 "SLURM_PROCID=4 is not below SLURM_NTASKS=4" -- one SLURM_PROCID=4
expect 2 "SLURM_LOCALID=2 is not below the 2 tasks of node 0" -- one SLURM_LOCALID=2
expect 2 "SLURM_STEP_TASKS_PER_NODE='2,1' sums to 3 tasks, not SLURM_NTASKS=4" -- one SLURM_STEP_TASKS_PER_NODE=2,1
expect 2 "SLURM_NTASKS=1, but SLURM_NTASKS_PER_NODE=2 asks for more per node" -- \
  one SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 SLURM_STEP_TASKS_PER_NODE=1 SLURM_STEP_NUM_NODES=1
expect 2 "SLURM_GPUS_ON_NODE=1 gives fewer GPUs than the 2 tasks" -- one SLURM_GPUS_ON_NODE=1 -- --device cuda --backend nccl
finish
