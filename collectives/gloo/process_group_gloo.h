// The Gloo backend: Gloo's TCP transport, connected through the Tandem store, with
// Gloo's own algorithms (allreduce, broadcast, allgather, barrier; reduce-scatter by
// its halving-doubling algorithm) run on the communication thread.
// Interface: the hostname/address of this machine that peers can reach is chosen from
// MASTER_ADDR (loopback when the store is on loopback, else this host's name), or
// set with TANDEM_GLOO_IFNAME=<network interface>.
// Invariant: every Gloo call carries the group's timeout, so the comm thread never
// blocks forever; f16/bf16 are reduced through float by Tandem's reduce functions.
#pragma once

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

// Gloo's reduce-scatter, as the process group runs it: reduces size * n elements of
// `data` in place; the result for this rank lands in data[0, n). Exposed for the
// benchmark's raw rows.
void gloo_reduce_scatter_in_place(const std::shared_ptr<gloo::Context>& context, void* data,
                                  int64_t count_per_rank, DType dtype, ReduceOp op);

}  // namespace tandem
