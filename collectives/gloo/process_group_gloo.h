// The Gloo backend: Gloo's TCP transport, connected through the Tandem store, with
// Gloo's own algorithms (allreduce, broadcast, allgather, barrier) run on the
// communication thread; reduce-scatter is ours, in rounds of Gloo sends and receives.
// Temporaries (peak_temporary_bytes): reduce-scatter holds size x min(slice, round)
// bytes, the round being 1 MiB of each slice (collectives/rounds.h); all-gather works
// in the caller's output (Gloo's ring runs through it: nothing staged, by us or Gloo).
// Interface: the hostname/address of this machine that peers can reach is chosen from
// MASTER_ADDR (loopback when the store is on loopback, else this host's name), or
// set with TANDEM_GLOO_IFNAME=<network interface>.
// Invariant: every Gloo call carries the group's timeout, so the comm thread never
// blocks forever; f16/bf16 are reduced through float by Tandem's reduce functions.
#pragma once

#include <chrono>
#include <memory>

#include "collectives/backends.h"
#include "collectives/rounds.h"
#include "collectives/threaded_process_group.h"

namespace gloo {
class Context;
}

namespace tandem {

class ProcessGroupGloo : public ThreadedProcessGroup {
 public:
  // Connects the full mesh through args.store (blocking, bounded by args.timeout).
  explicit ProcessGroupGloo(const BackendArgs& args);
  ~ProcessGroupGloo() override;

  // The engine itself, for the benchmark's raw rows. Do not use it while ops of this
  // group are outstanding: Gloo contexts are not thread-safe.
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }
  size_t peak_temporary_bytes() const override;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  std::shared_ptr<gloo::Context> context_;
  const size_t round_bytes_;  // of each slice, per reduce-scatter round
  std::shared_ptr<PeakBytes> peak_temporary_;  // written by the comm thread's tasks only
};

// Reduce-scatter as the process group runs it: every rank's slice j of `in` (size * n
// elements) goes to rank j, which reduces the slices it receives in rank order into
// `out` (n elements; may be this rank's slice of `in`): out = slice of rank 0, then
// op= rank 1's, ... for every element, so the result is bit-identical whatever the
// rounds. It runs in rounds of `round_bytes` of each slice (an alltoall each: every
// slice crosses the wire once, as in a ring reduce-scatter), staging one round of every
// rank's piece; returns the bytes it staged (size x min(n, round) elements). `in` is only
// read. Sum for avg: the caller divides. Exposed for the benchmark's raw rows.
// Gloo's own ReduceScatterHalvingDoubling is not used: its run() returns while its
// last sends may still be reading the buffer (no waitSend), and large out-of-place
// reduce-scatters here came back with some elements of another op's data.
size_t gloo_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* in, void* out,
                           int64_t count_per_rank, DType dtype, ReduceOp op, uint32_t tag,
                           std::chrono::milliseconds timeout, size_t round_bytes = kRoundBytes);

}  // namespace tandem
