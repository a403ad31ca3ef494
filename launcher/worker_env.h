// The variables tandemrun gives each worker (docs/reference.md, docs/launching.md):
//   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT
//   TANDEM_RESTART_COUNT TANDEM_JOB_ID TANDEM_STORE_HOSTED=1
//   OMP_NUM_THREADS OPENBLAS_NUM_THREADS (only where the user has not set them)
// TANDEM_STORE_HOSTED=1 tells collectives' init_process_group that node 0's tandemrun
// already serves the store at MASTER_ADDR:MASTER_PORT, so rank 0 must not host one;
// TANDEM_JOB_ID must match the store's job id or its handshake refuses the worker, and
// TANDEM_RESTART_COUNT keeps each attempt's rendezvous keys apart.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/options.h"

namespace tandem::launcher {

std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchOptions& options, int local_rank,
                                                                   int attempt, int store_port);

// max(1, usable cores / processes on this node); usable cores honour the CPU affinity
// mask tandemrun runs under (containers, taskset).
int threads_per_worker(int local_processes);

}  // namespace tandem::launcher
