#!/usr/bin/env bash
# Both layouts of examples/slurm/, submitted with sbatch to the test cluster (slurm_lib.sh:
# 2 nodes in network namespaces), must train to the same param_checksum as the same
# 2 x 2 job started by hand with one tandemrun per namespace. All use gloo, whose
# reduction order depends only on the world size, so every bit must agree.
#   tandemrun-per-node.sbatch   one tandemrun per node
#   srun-per-task.sbatch        one srun task per replica: tandem-train reads Slurm's
#                               variables and finds the store at node0 (which resolves
#                               through slurm_lib.sh's private /etc/hosts)
# Usage: layouts.sh BIN_DIR. Skips (exit 0, "SKIP: ...") where the cluster cannot start.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/slurm_lib.sh"
slurm_test_begin "${1:-}" tandem-train tandemrun
TRAIN_ARGS=(--max-steps 20 --seed 7 --synthetic-train 4096 --synthetic-test 512 --collective-timeout-s 120)

# Reference: one tandemrun per namespace, started here (every command hang-guarded).
port="$(free_port_in 0)"
for n in 0 1; do
  on_node "$n" timeout 240 "$BIN/tandemrun" --nnodes 2 --node-rank "$n" --nproc-per-node 2 \
    --master-addr "$ADDR0" --master-port "$port" --rdzv-timeout-s 60 -- \
    "$BIN/tandem-train" --mode ddp --backend gloo --data synthetic --model mlp "${TRAIN_ARGS[@]}" \
    --summary-json "$D/reference.json" >"$D/reference$n.out" 2>&1 &
done
for n in 0 1; do wait -n || { slurm_fail "reference: a tandemrun failed"; tail -20 "$D"/reference*.out; }; done

# The batch script, as a user submits it; sbatch --wait returns the job's exit code.
export PATH="$BIN:$PATH" TANDEM_SECRET_DIR="$D"
on_ctl timeout 300 sbatch --wait --quiet --chdir "$D" --output "$D/job-%j.out" \
  "$HERE/../../examples/slurm/tandemrun-per-node.sbatch" "${TRAIN_ARGS[@]}" --summary-json "$D/sbatch.json"
rc=$?
[ "$rc" = 0 ] || { slurm_fail "the batch job exited $rc"; tail -30 "$D"/job-*.out; }
same_params "sbatch, one tandemrun per node" "$D/reference.json" "$D/sbatch.json"
ls "$D"/job-*.secret 2>/dev/null && slurm_fail "the batch script left its job secret behind"

on_ctl timeout 300 sbatch --wait --quiet --chdir "$D" --output "$D/tasks-%j.out" \
  "$HERE/../../examples/slurm/srun-per-task.sbatch" --backend gloo "${TRAIN_ARGS[@]}" --summary-json "$D/tasks.json"
rc=$?
[ "$rc" = 0 ] || { slurm_fail "the one-task-per-replica batch job exited $rc"; tail -30 "$D"/tasks-*.out; }
same_params "sbatch, one srun task per replica" "$D/reference.json" "$D/tasks.json"
ls "$D"/job-*.secret 2>/dev/null && slurm_fail "the one-task-per-replica script left its job secret behind"
grep -q "without a job secret" "$D"/tasks-*.out && slurm_fail "the one-task-per-replica job ran its store without a secret"
slurm_done
