// ThreadedProcessGroup: the part the CPU backends (mpi, gloo, shm) share. Each op is
// queued on one communication thread that calls the engine's blocking collective,
// and its Work is a CompletionWork the thread finishes.
//
//   caller:       allreduce(b0) allreduce(b1) ... compute ... w0.wait() w1.wait()
//   comm thread:      [engine allreduce b0][engine allreduce b1]
//
// With the op check on (collectives/op_check.h), each task first gathers every rank's
// fingerprint of the op and fails, on every rank alike, if they differ.
//
// Invariants: the engine is only ever called from the comm thread (so MPI needs no
// more than MPI_THREAD_SERIALIZED); an engine error becomes a CollectiveError that
// also says which ranks have not reached the op; a wait that times out, or an op the
// ranks disagree on, breaks the group, so later ops fail fast instead of running out
// of step with other ranks.
#pragma once

#include <functional>

#include "collectives/comm_thread.h"
#include "collectives/op_check.h"
#include "collectives/process_group.h"

namespace tandem {

class ThreadedProcessGroup : public ProcessGroup {
 public:
  std::optional<std::chrono::nanoseconds> comm_thread_cpu_time() const override { return comm_.cpu_time(); }

 protected:
  explicit ThreadedProcessGroup(Setup setup);

  // Queues `engine_call` for `c` and returns its Work at once. Zero-byte ops (but
  // barriers) complete in their turn without moving data (the op check, when on,
  // still runs for them: 0 elements on one rank and 7 on another is a mismatch).
  std::shared_ptr<Work> submit(const Collective& c, std::function<void()> engine_call);

  // Turns the cross-rank op check on for every op submitted from now on. Derived
  // constructors call it once, before the first op; `gather` must hold its engine
  // state by value (tasks may run during the group's destruction).
  void check_ops_with(FingerprintGather gather) { gather_ = std::move(gather); }
  // Or the engine checks every op itself, inside the op's own first exchange (shm, mpi):
  // nothing is added around its ops, and a zero-byte op, which moves nothing, runs
  // `check_only` in its turn instead.
  void check_ops_in_engine(std::function<void(const Collective&)> check_only) { check_only_ = std::move(check_only); }

  bool accepts(Device device) const override { return device.is_cpu(); }

  // Derived destructors call this first, while their engine state is alive. Returns
  // true when the comm thread had to be abandoned inside the engine.
  bool stop_comm_thread();
  // Runs fn on the comm thread, after everything queued (engine teardown).
  void run_on_comm_thread(const std::function<void()>& fn) { comm_.run_inline(fn); }

 private:
  CommThread comm_;
  FingerprintGather gather_;  // empty (and check_only_ empty): the op check is off
  std::function<void(const Collective&)> check_only_;  // set: the engine checks its ops
};

}  // namespace tandem
