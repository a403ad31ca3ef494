// What srun tells each task, read into Tandem's launch variables (collectives/init.h):
// a program started as `srun --ntasks-per-node=N tandem-train --mode ddp ...` needs no
// launcher. Used only when neither tandemrun's RANK nor mpirun's OMPI_COMM_WORLD_RANK is
// set and SLURM_PROCID is.
//
// Invariant: every count srun gives is checked against the others before it is used, and
// a disagreement throws SlurmEnvError naming the variables (tandem-train exits 2), so a
// step whose tasks each believe they are alone (Open MPI issue 13523) fails at once
// instead of training N independent one-rank jobs.
//
// The store: rank 0 hosts it on the first host of SLURM_STEP_NODELIST (the step's nodes;
// SLURM_JOB_NODELIST may hold nodes the step does not use), on a port derived from
// SLURM_JOB_ID and SLURM_STEP_ID (slurm_ports). If that port is taken, rank 0 tries the
// next candidates in order and the other ranks try the same sequence, skipping any store
// that refuses them: its job id ("slurm-<JOB>.<STEP>") is not theirs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/init.h"

namespace tandem::slurm {

// Slurm's settings disagree with each other, or with the run: a usage error.
class SlurmEnvError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The derived store ports: kPortBase + (SLURM_JOB_ID * 7919 + SLURM_STEP_ID + k) mod
// kPortSpan for k = 0 .. kPortCandidates - 1 (below Linux's ephemeral range, 32768 up).
inline constexpr int kPortBase = 20000;
inline constexpr int kPortSpan = 10000;
inline constexpr int kPortCandidates = 8;
std::vector<int> slurm_ports(uint64_t job_id, uint64_t step_id);

// Slurm's compressed counts, "2(x3),1" -> {2, 2, 2, 1}; throws SlurmEnvError naming `var`.
std::vector<int> parse_tasks_per_node(const std::string& var, std::string_view text);

// Whether srun started this process: SLURM_PROCID is set.
bool under_srun(const EnvLookup& lookup);

// Fills rank, world size, local rank and size, node rank and count from the SLURM_*
// variables; throws SlurmEnvError.
void read_srun_env(const EnvLookup& lookup, LaunchEnv& env);
// Where no store was named: its address (the first host of SLURM_STEP_NODELIST), port
// candidates and job id ("slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>"); throws SlurmEnvError.
void read_srun_store(const EnvLookup& lookup, LaunchEnv& env);

// --device cuda under srun: the GPU index this task uses, after checking that
// SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES give every task on the node a GPU of its
// own (one visible GPU with enough on the node: srun bound one per task, use it).
int gpu_index(const EnvLookup& lookup, const LaunchEnv& env);

}  // namespace tandem::slurm
