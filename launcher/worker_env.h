// The variables tandemrun gives each worker (docs/reference.md, docs/launching.md):
//   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT
//   TANDEM_STORE_ADDR TANDEM_STORE_PORT TANDEM_RESTART_COUNT TANDEM_JOB_ID TANDEM_STORE_HOSTED=1
//   torchrun's: GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK ROLE_WORLD_SIZE ROLE_NAME
//     TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID
//     TORCHELASTIC_USE_AGENT_STORE=False
//   OMP_NUM_THREADS as torchrun sets it, OPENBLAS_NUM_THREADS as Tandem does (see below)
// Two stores: TANDEM_STORE_ADDR:TANDEM_STORE_PORT is tandemrun's, or with --rdzv-endpoint
// the tandem-store's (TANDEM_STORE_HOSTED=1
// tells collectives' init_process_group that rank 0 must not host one), while
// MASTER_ADDR:MASTER_PORT is a port node 0 found free for the job's own processes to
// serve, as rank 0 of a PyTorch job does with its TCPStore (torchrun's agent store speaks
// PyTorch's protocol, which tandemrun does not, hence TORCHELASTIC_USE_AGENT_STORE=False).
// TANDEM_JOB_ID must match the store's job id or its handshake refuses the worker, and
// TANDEM_RESTART_COUNT keeps each attempt's rendezvous keys apart.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/options.h"

namespace tandem::launcher {

// `store_port`: tandemrun's store; `master_port`: the port reserved for the job's rank 0.
std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchOptions& options, int local_rank,
                                                                   int attempt, int store_port, int master_port);

// max(1, usable cores / processes on this node); usable cores honour the CPU affinity
// mask tandemrun runs under (containers, taskset).
int threads_per_worker(int local_processes);

}  // namespace tandem::launcher
