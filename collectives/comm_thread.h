// The CPU backends' communication thread: runs queued collectives one at a time, in
// the order issued, so they progress while the caller computes (docs/architecture.md:
// on the CPU, the comm stream becomes this thread and events become completion flags).
// Invariants: every submitted work is finished exactly once; once a task fails (or a
// wait times out and breaks the group) every later task fails without running, since
// ranks can no longer be assumed to agree on which op comes next.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "collectives/work.h"

namespace tandem {

class CommThread {
 public:
  using Task = std::function<void()>;  // throws on failure

  explicit CommThread(std::string group_name);
  ~CommThread();  // shutdown(0) if not done yet
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task`; the thread runs it and finishes `work` with its outcome. On a
  // broken group `work` fails at once instead (so it may finish before earlier ones).
  void submit(std::shared_ptr<CompletionWork> work, Task task);

  // From now on queued and future tasks fail with `reason` (the first reason sticks).
  void break_group(const std::string& reason);
  bool broken() const;

  // Lets queued tasks drain for up to `grace`, then breaks the group and joins the
  // thread. A thread stuck inside the engine on a broken group is detached instead (it
  // holds only shared state) and shutdown returns true: the engine state is unknown.
  bool shutdown(std::chrono::milliseconds grace);

  // Runs `fn` on the communication thread after all queued tasks and waits for it
  // (for engine calls that must not race the thread, e.g. MPI under THREAD_SERIALIZED).
  void run_inline(const Task& fn);

  // CPU time the thread has used so far (its tasks, and its polling before it parks);
  // nullopt once it was shut down.
  std::optional<std::chrono::nanoseconds> cpu_time() const;

 private:
  struct Item {
    std::shared_ptr<CompletionWork> work;
    Task task;
  };
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    // Bumped with every change the thread must see (a task, a stop, a break): an idle
    // thread polls it for a moment before it parks on cv (collectives/spin.h).
    std::atomic<uint64_t> events{0};
    std::deque<Item> queue;
    bool stop = false;
    bool exited = false;
    bool in_task = false;
    std::string broken;
  };
  static void loop(std::shared_ptr<State> state);

  std::string name_;
  std::shared_ptr<State> state_;
  std::thread thread_;
  bool shut_down_ = false;
};

}  // namespace tandem
