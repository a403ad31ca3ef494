// Work: the handle every collective returns at once (c10d's Work semantics).
//
//   wait(timeout)        CPU backends: blocks until the op completes. Device backends
//                        (nccl): makes the caller's stream wait for the op and returns
//                        without blocking the host. Throws the op's error if it failed
//                        (CollectiveError), and CollectiveTimeout if it was not complete
//                        within `timeout`; that message names the op, its sequence
//                        number, its bytes and the ranks that have not reached it, and
//                        the group is broken from then on (later ops fail at once).
//   wait()               the same with the group's timeout.
//   synchronize(timeout) blocks the host until the op completes, on every backend.
//   is_completed()       true once the op finished, successfully or not. Never blocks.
//   exception()          the error it finished with (null while running or on success).
//   completed_at()       when the op finished on the host, where the backend knows it
//                        (CPU backends); empty while running and on device backends.
//
// Invariant: handles of one group complete in the order their ops were issued (once
// the group is broken, ops issued after that fail at once); the buffers passed to an
// op must stay alive until its handle is completed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "tandem/collectives/types.h"

namespace tandem {

class Work {
 public:
  Work(Collective collective, std::chrono::milliseconds default_timeout)
      : collective_(collective), default_timeout_(default_timeout) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  virtual void wait(std::chrono::milliseconds timeout) = 0;
  void wait() { wait(default_timeout_); }
  virtual void synchronize(std::chrono::milliseconds timeout) { wait(timeout); }
  virtual bool is_completed() const = 0;
  virtual std::exception_ptr exception() const = 0;

  bool is_success() const { return is_completed() && !exception(); }
  virtual std::optional<std::chrono::steady_clock::time_point> completed_at() const { return std::nullopt; }
  // The error's message, or "" when there is none.
  std::string error_message() const;

  uint64_t seq() const { return collective_.seq; }
  OpType op() const { return collective_.op; }
  size_t bytes() const { return collective_.bytes(); }
  const Collective& collective() const { return collective_; }

 protected:
  Collective collective_;
  std::chrono::milliseconds default_timeout_;
};

// Work completed by a host thread (the CPU backends' communication thread).
class CompletionWork : public Work {
 public:
  // Builds the timeout message (it queries peers' progress) and breaks the group.
  using TimeoutReporter = std::function<std::string(const Collective&, std::chrono::milliseconds)>;

  CompletionWork(Collective collective, std::chrono::milliseconds default_timeout,
                 TimeoutReporter on_timeout)
      : Work(collective, default_timeout), on_timeout_(std::move(on_timeout)) {}

  // Called once by the thread that ran the op.
  void finish(std::exception_ptr error = nullptr);

  using Work::wait;
  void wait(std::chrono::milliseconds timeout) override;
  bool is_completed() const override;
  std::exception_ptr exception() const override;
  std::optional<std::chrono::steady_clock::time_point> completed_at() const override;

 private:
  TimeoutReporter on_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::atomic<bool> finished_{false};  // done_, readable without the lock (a waiter spins on it)
  std::chrono::steady_clock::time_point done_at_{};
  std::exception_ptr error_;
};

}  // namespace tandem
