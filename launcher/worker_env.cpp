// Worker variables and thread counts (see header).
#include "launcher/worker_env.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace tandem::launcher {

int threads_per_worker(int local_processes) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                           : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, cores / std::max(1, local_processes));
}

std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchOptions& o, int local_rank,
                                                                   int attempt, int store_port, int master_port) {
  const std::string rank = std::to_string(o.global_rank(local_rank));
  const std::string world = std::to_string(o.world_size());
  std::vector<std::pair<std::string, std::string>> v = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"TANDEM_STORE_ADDR", o.external_store() ? o.store_host : o.master_addr},
      {"TANDEM_STORE_PORT", std::to_string(store_port)},
      {"TANDEM_RESTART_COUNT", std::to_string(attempt)},
      {"TANDEM_JOB_ID", o.job_id},
      {"TANDEM_STORE_HOSTED", "1"},
      // torchrun's names, with its values for one role on every node.
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"ROLE_NAME", "default"},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.job_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
  };
  // An elastic job's world size changes between generations: tandem-train then keeps the
  // global batch by default (--elastic-batch auto).
  if (o.elastic()) v.emplace_back("TANDEM_ELASTIC", "1");
  if (!o.elastic_history.empty()) v.emplace_back("TANDEM_ELASTIC_HISTORY", o.elastic_history);
  // The job secret travels in an inherited descriptor, not here (launcher/job_secret.h).
  if (o.worker_secret_fd >= 0) v.emplace_back("TANDEM_JOB_SECRET_FD", std::to_string(o.worker_secret_fd));
  // Where a worker writes its flight recorder (collectives/flight_recorder.h).
  if (!o.log_dir.empty()) v.emplace_back("TANDEM_LOG_DIR", o.log_dir + "/attempt" + std::to_string(attempt));
  // Without these every worker's OpenMP/OpenBLAS pool would take every core, and N
  // workers would oversubscribe the machine N times. OMP_NUM_THREADS follows torchrun
  // (1 with several processes per node), which PyTorch's intra-op pool reads; Tandem
  // programs size their BLAS pool from OPENBLAS_NUM_THREADS first, so they keep the
  // share of the cores. A value the user set is passed on untouched.
  if (!std::getenv("OMP_NUM_THREADS") && o.nproc_per_node > 1) v.emplace_back("OMP_NUM_THREADS", "1");
  if (!std::getenv("OPENBLAS_NUM_THREADS")) {
    v.emplace_back("OPENBLAS_NUM_THREADS", std::to_string(threads_per_worker(o.nproc_per_node)));
  }
  return v;
}

}  // namespace tandem::launcher
