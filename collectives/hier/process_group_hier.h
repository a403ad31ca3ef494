// The hier backend: a hierarchical all-reduce for CPU tensors across nodes. Each op is
// composed from two sub-groups on the communication thread:
//   node group     the ranks of this node, over shared memory (the shm backend)
//   leaders group  one rank per node (its lowest global rank, "local rank 0"), over gloo;
//                  absent when the job has a single node
//   allreduce       node all-reduce, leaders all-reduce, node broadcast from the leader:
//                   a node's bytes cross the network once each way, instead of once per
//                   rank as in a flat ring. avg: sum in both stages, divide once by the
//                   world size (as the other backends: exact sum, then divide)
//   broadcast       root -> its node's leader (shm), leaders (gloo), leader -> node (shm)
//   allgather       node allgather, leaders allgather, node broadcast: in the output
//                   itself when nodes hold consecutive ranks (tandemrun's layout; nothing
//                   staged), else in rounds of kRoundBytes (collectives/rounds.h) of each rank's part,
//                   staged node-major (world x round bytes) and reordered by global rank
//   reduce_scatter  the allreduce above: in place, of the whole buffer where it is
//                   (nothing staged); out of place, slice by slice in rounds of
//                   kRoundBytes, this rank's slice straight into the output, the
//                   others' into one round of temporary (correct and bounded, not fast)
//   barrier         node barrier, leaders barrier, node barrier
// Nodes: ranks publish hostname, boot id and NODE_RANK (tandemrun sets it) in the store;
// equal identities share a node. Nodes are numbered by their lowest global rank, ranks
// within a node by global rank; every node must have the same number of ranks.
// Temporaries: peak_temporary_bytes() reports the rounds' staging above;
// TANDEM_COLLECTIVE_CHUNK_KB overrides the round (the same on every rank).
// Invariant: every rank of a node issues the same sub-ops in the same order (the same
// hier op decides them), so the node and leaders groups stay in step; each sub-op is
// waited for with the group's timeout. The op check runs over the whole world (its
// fingerprints travel through the same three stages); the sub-groups' own checks are off.
#pragma once

#include <memory>

#include "collectives/backends.h"
#include "collectives/threaded_process_group.h"

namespace tandem {

struct HierState;

class ProcessGroupHier : public ThreadedProcessGroup {
 public:
  // Finds the nodes through args.store, then builds the node and leaders groups
  // (blocking, each bounded by args.timeout).
  explicit ProcessGroupHier(const BackendArgs& args);
  ~ProcessGroupHier() override;

  size_t peak_temporary_bytes() const override;
  // Its own thread's, plus the node and leaders groups' (their threads run the stages).
  std::optional<std::chrono::nanoseconds> comm_thread_cpu_time() const override;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  std::shared_ptr<HierState> state_;
};

}  // namespace tandem
