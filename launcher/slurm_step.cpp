// tandemrun's flags from the Slurm step it runs in (see header).
#include "launcher/slurm_step.h"

#include "collectives/slurm_env.h"

namespace tandem::launcher {
std::string apply_slurm_step(LaunchOptions& o, const std::set<std::string>& explicit_flags,
                             const EnvLookup& lookup) {
  if (!slurm::under_srun(lookup)) return "";
  const auto given = [&](const char* flag) { return explicit_flags.count(flag) > 0; };
  LaunchEnv step;
  try {
    slurm::read_srun_env(lookup, step);
  } catch (const slurm::SlurmEnvError& e) {
    throw UsageError(std::string("tandemrun under srun: ") + e.what());
  }
  if (step.node_count <= 0) {
    throw UsageError("tandemrun under srun: neither SLURM_STEP_NUM_NODES nor SLURM_NNODES is set (srun sets both)");
  }
  if (step.world_size != step.node_count) {
    throw UsageError("tandemrun under srun runs as one task per node, but this step has SLURM_NTASKS=" +
                     std::to_string(step.world_size) + " tasks on " + std::to_string(step.node_count) +
                     (step.node_count == 1 ? " node" : " nodes") +
                     ": start it with srun --ntasks-per-node=1 tandemrun --nproc-per-node N ..., or start "
                     "the replicas themselves with srun and no tandemrun (docs/launching.md, \"Under Slurm\")");
  }
  if (given("--nnodes") && o.nnodes != step.node_count) {
    throw UsageError("--nnodes " + std::to_string(o.nnodes) + " disagrees with this Slurm step's " +
                     std::to_string(step.node_count) + (step.node_count == 1 ? " node" : " nodes") +
                     " (SLURM_STEP_NUM_NODES): leave --nnodes out under srun");
  }
  if (given("--node-rank") && o.node_rank != step.node_rank) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " disagrees with SLURM_NODEID=" +
                     std::to_string(step.node_rank) + ": leave --node-rank out under srun");
  }
  o.nnodes = step.node_count;
  o.node_rank = step.node_rank;
  std::string took = "under Slurm: node " + std::to_string(o.node_rank) + " of " + std::to_string(o.nnodes);
  if (given("--master-addr") && given("--master-port") && given("--job-id")) return took;
  try {
    slurm::read_srun_store(lookup, step);
  } catch (const slurm::SlurmEnvError& e) {
    throw UsageError(std::string("tandemrun under srun: ") + e.what() +
                     " (or give --master-addr, --master-port and --job-id)");
  }
  if (!given("--master-addr")) {
    o.master_addr = step.master_addr;
    took += std::string(o.external_store() ? "; node 0 (MASTER_ADDR) is " : "; the store on ") + o.master_addr +
            " (first host of SLURM_STEP_NODELIST)";
  }
  if (!given("--master-port")) {
    o.master_port = step.port_candidates.front();
    o.port_candidates = step.port_candidates;
    took += ", on the first free of ports " + port_list(o.port_candidates) + " (from SLURM_JOB_ID and SLURM_STEP_ID)";
  }
  if (!given("--job-id")) {
    o.job_id = step.job_id;
    took += "; job id " + o.job_id;
  }
  return took;
}

}  // namespace tandem::launcher
