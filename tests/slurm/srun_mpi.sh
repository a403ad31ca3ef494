#!/usr/bin/env bash
# The mpi backend started by Slurm itself: `srun --mpi=pmix -N2 --ntasks-per-node=2
# tandem-train --backend mpi` inside an allocation of the test cluster (slurm_lib.sh)
# must train to the same param_checksum as `mpirun -np 4` on one node. Open MPI 4.1
# learns its ranks from Slurm's PMIx server (mpi_pmix_v4); no mpirun and no ssh.
# mpirun inside `salloc -N2` must give the same checksum too.
# Usage: srun_mpi.sh BIN_DIR. Skips (exit 0, "SKIP: ...") where the cluster cannot start.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/slurm_lib.sh"
command -v mpirun >/dev/null || netns_skip "mpirun (Open MPI) is not installed"
slurm_test_begin "${1:-}" tandem-train
on_ctl srun --mpi=list 2>&1 | grep -q pmix_v4 || netns_skip "this Slurm has no mpi/pmix_v4 plugin (srun --mpi=list)"
TRAIN=("$BIN/tandem-train" --mode ddp --backend mpi --data synthetic --model mlp --max-steps 20 --seed 7
       --synthetic-train 4096 --synthetic-test 512 --collective-timeout-s 120)
# The nodes share one hostname: Open MPI's shared-memory transport would take them for
# one machine, so tcp and self only (as netns_lib.sh's mpirun_2x2).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=tcp,self

on_ctl timeout 240 mpirun --oversubscribe -np 4 "${TRAIN[@]}" --summary-json "$D/reference.json" \
  >"$D/reference.out" 2>&1 || { slurm_fail "reference: mpirun -np 4 failed"; tail -20 "$D/reference.out"; }

# Under srun, Open MPI's own variables (OMPI_COMM_WORLD_*) appear only inside MPI_Init,
# after tandem-train has read its rank from the environment: it reads Slurm's
# (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE), which PMIx
# hands to MPI too.
on_ctl timeout 300 salloc --quiet -N2 --ntasks-per-node=2 \
  srun --mpi=pmix --kill-on-bad-exit=1 "${TRAIN[@]}" --summary-json "$D/srun.json" >"$D/srun.out" 2>&1 ||
  { slurm_fail "srun --mpi=pmix exited $?"; tail -30 "$D/srun.out"; }
# mpirun inside an allocation: Open MPI finds the allocation's nodes and starts its
# daemons with srun, then its ranks read mpirun's variables as anywhere else.
on_ctl timeout 300 salloc --quiet -N2 --ntasks-per-node=2 \
  mpirun --oversubscribe -np 4 "${TRAIN[@]}" --summary-json "$D/mpirun-alloc.json" >"$D/mpirun-alloc.out" 2>&1 ||
  { slurm_fail "mpirun inside salloc -N2 exited $?"; tail -30 "$D/mpirun-alloc.out"; }
same_params "mpirun inside an allocation of 2 nodes x 2 tasks, mpi backend" "$D/reference.json" "$D/mpirun-alloc.json"

# Rank 0's store, made over MPI, must be reachable from node1 by Slurm's name for node0.
grep -m1 "could not start a store\|cannot reach the store" "$D/srun.out" &&
  slurm_fail "srun --mpi=pmix: a rank went without the mpi backend's store"
same_params "srun --mpi=pmix, 2 nodes x 2 tasks, mpi backend" "$D/reference.json" "$D/srun.json"
slurm_done
