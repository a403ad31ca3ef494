// The shm backend: collectives through one POSIX shared-memory segment, for ranks on
// one node with CPU tensors (collectives/shm/shm_segment.h has the segment and its
// round protocol). Ops run on the communication thread like gloo's, with the same
// Work semantics, op check and timeouts.
//
// Algorithms (each op is a sequence of rounds, at most one slot's bytes per rank each):
//   allreduce       every rank copies its chunk into its slot; then every rank reduces
//                   all slots in rank order into its own output (bit-identical results
//                   everywhere; f16/bf16 through float, reduce_kernels.h). From 3 ranks,
//                   ops of several rounds instead reduce-scatter + all-gather: each rank
//                   reduces its 1/W share into its result area, which every rank copies
//                   out in the next round (pipelined with the next chunk's copy-in)
//                   In place in shared buffers (allocate_shared_buffer: DDP's buckets),
//                   no copy in: each rank reduces its 1/W share of every rank's buffer,
//                   in rank order, into its own buffer, then copies the other shares
//                   from their owners' buffers, then one closing round. Every all-reduce
//                   of at least kInBuffersMinBytes starts with a round in which the
//                   ranks say which shared buffer they passed; unless all passed the
//                   same one, they all take the copying algorithms above. Same sums in
//                   the same order: bit-identical to them. Ranks 2 and up sum through
//                   64 KiB of scratch (their own input joins the sum at their position)
//   broadcast       the root copies its chunk in; every rank copies it out
//   allgather       every rank copies its chunk in; every rank copies all of them out.
//                   In place in shared buffers (ZeRO's parameter buckets), no copy in:
//                   every rank copies the other slices from their owners' buffers, then
//                   one closing round; the claim round and the fallback are the all-reduce's
//   reduce_scatter  every rank copies, per destination, its chunk of that slice; each
//                   rank reduces its own slice's pieces in rank order. In place in shared
//                   buffers (ZeRO's buckets), no copy in: each rank reduces its slice of
//                   every rank's buffer, in rank order, into its own, then one closing
//                   round; the claim round and the fallback are the all-reduce's
//   barrier         one empty round
// Invariant: every rank runs the same rounds in the same order, so the k-th round is
// the same step of the same op everywhere. The op check rides in each op's first round
// (every rank's fingerprint beside its slot, compared before any data is consumed);
// only a zero-byte op takes a round for it alone.
#pragma once

#include <memory>

#include "collectives/backends.h"
#include "collectives/threaded_process_group.h"

namespace tandem {

class ShmSegment;
class PeerBuffers;

// In-place all-reduces, reduce-scatters and all-gathers from this size on may run in
// shared buffers (see above); smaller ones, where one round is all they take, copy
// through the segment.
constexpr size_t kInBuffersMinBytes = size_t{64} << 10;

class ProcessGroupShm : public ThreadedProcessGroup {
 public:
  // Creates or attaches the group's segment through args.store (bounded by args.timeout).
  explicit ProcessGroupShm(const BackendArgs& args);
  ~ProcessGroupShm() override;

  SharedBuffer allocate_shared_buffer(size_t bytes) override;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  std::shared_ptr<ShmSegment> segment_;
  std::shared_ptr<PeerBuffers> peers_;
  int split_min_ranks_;  // world size from which large all-reduces split the reduction
  bool shared_buffers_;  // allocate_shared_buffer offers them (TANDEM_SHM_BUFFERS)
  bool check_ = true;    // the op check, folded into each op's first round
};

}  // namespace tandem
