// tandemrun as one task per node of a Slurm step (`srun --ntasks-per-node=1 tandemrun
// --nproc-per-node N -- PROGRAM`): the flags that Slurm already knows are taken from it,
// so one batch script serves this layout and srun's one task per replica alike.
//
//   --nnodes       SLURM_STEP_NUM_NODES (else SLURM_NNODES)
//   --node-rank    SLURM_NODEID
//   --master-addr  the first host of SLURM_STEP_NODELIST (the step's nodes, which may be
//                  fewer than the job's)
//   --master-port  the candidates derived from SLURM_JOB_ID and SLURM_STEP_ID
//                  (collectives/slurm_env.h): node 0 hosts the store on the first one free,
//                  the other nodes try them in the same order
//   --job-id       slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>
//
// Invariant: a flag given on the command line wins, except --nnodes and --node-rank that
// disagree with the step (each node would wait for a job that never forms): those, a step
// of more than one task on a node, and disagreeing SLURM_* counts are UsageErrors that
// name the flag and the variable.
#pragma once

#include <set>
#include <string>

#include "collectives/init.h"
#include "launcher/options.h"

namespace tandem::launcher {

// Applies the step's settings to `o` where `explicit_flags` (long names, "--nnodes") does
// not hold the flag. Does nothing outside srun (no SLURM_PROCID). Returns a line for the
// log saying what was taken ("" outside srun).
std::string apply_slurm_step(LaunchOptions& o, const std::set<std::string>& explicit_flags,
                             const EnvLookup& lookup);

}  // namespace tandem::launcher
