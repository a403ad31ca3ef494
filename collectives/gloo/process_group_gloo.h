// The Gloo backend: Gloo's TCP transport, connected through the Tandem store, with
// Gloo's own algorithms (allreduce, broadcast, allgather, barrier; reduce-scatter on
// its alltoall) run on the communication thread.
// Interface: the hostname/address of this machine that peers can reach is chosen from
// MASTER_ADDR (loopback when the store is on loopback, else this host's name), or
// set with TANDEM_GLOO_IFNAME=<network interface>.
// Invariant: every Gloo call carries the group's timeout, so the comm thread never
// blocks forever; f16/bf16 are reduced through float by Tandem's reduce functions.
#pragma once

#include <chrono>
#include <memory>

#include "collectives/backends.h"
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

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  std::shared_ptr<gloo::Context> context_;
};

// Reduce-scatter as the process group runs it, on Gloo's alltoall: every rank's slice j
// of `in` (size * n elements) goes to rank j, which reduces the slices it receives in
// rank order into `out` (n elements; may be this rank's slice of `in`). `in` is only
// read. Sum for avg: the caller divides. Exposed for the benchmark's raw rows.
// Gloo's own ReduceScatterHalvingDoubling is not used: its run() returns while its
// last sends may still be reading the buffer (no waitSend), and large out-of-place
// reduce-scatters here came back with some elements of another op's data.
void gloo_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* in, void* out,
                         int64_t count_per_rank, DType dtype, ReduceOp op, uint32_t tag,
                         std::chrono::milliseconds timeout);

}  // namespace tandem
