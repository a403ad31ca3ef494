// Factories of the engine backends (internal to collectives/). Each is defined in its
// backend's folder, or by a stub that says the build lacks it, so no file outside a
// backend's own needs an #ifdef.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/process_group.h"

namespace tandem {

struct BackendArgs {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int node_rank = -1;  // NODE_RANK (tandemrun); -1: not given (the hier backend's node identity)
  Device device = Device::cpu();
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::shared_ptr<Store> store;         // group-prefixed; null under mpirun without MASTER_ADDR
  std::shared_ptr<StoreServer> server;  // non-null when this rank hosts the store
  std::string master_addr;              // where the store lives (gloo picks its interface from it)
  std::string job_id;
  std::string group_name;
  // The cross-rank op check (collectives/op_check.h); the CPU backends honour it.
  bool check_ops = true;
};

std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args);
std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args);
std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args);
// Shared memory, ranks on one node (collectives/shm/); always built: it needs no library.
std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args);
// Hierarchical across nodes: shm within each node, gloo between one leader per node
// (collectives/hier/); always built, it needs gloo only when the job spans nodes.
std::shared_ptr<ProcessGroup> make_hier_group(const BackendArgs& args);

// Whether each backend was compiled in (defined next to the factories).
extern const bool kMpiBuilt;
extern const bool kGlooBuilt;
extern const bool kNcclBuilt;
extern const bool kShmBuilt;

}  // namespace tandem
