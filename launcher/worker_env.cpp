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
                                                                   int attempt, int store_port) {
  std::vector<std::pair<std::string, std::string>> v = {
      {"RANK", std::to_string(o.global_rank(local_rank))},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(o.world_size())},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(store_port)},
      {"TANDEM_RESTART_COUNT", std::to_string(attempt)},
      {"TANDEM_JOB_ID", o.job_id},
      {"TANDEM_STORE_HOSTED", "1"},
  };
  // The job secret travels in an inherited descriptor, not here (launcher/job_secret.h).
  if (o.job_secret_fd >= 0) v.emplace_back("TANDEM_JOB_SECRET_FD", std::to_string(o.job_secret_fd));
  // Where a worker writes its flight recorder (collectives/flight_recorder.h).
  if (!o.log_dir.empty()) v.emplace_back("TANDEM_LOG_DIR", o.log_dir + "/attempt" + std::to_string(attempt));
  // Without this every worker's OpenMP/OpenBLAS pool would take every core, and N
  // workers would oversubscribe the machine N times.
  const std::string threads = std::to_string(threads_per_worker(o.nproc_per_node));
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    if (!std::getenv(name)) v.emplace_back(name, threads);
  }
  return v;
}

}  // namespace tandem::launcher
