// CommThread: a FIFO of collectives run by one thread (see comm_thread.h).
#include "collectives/comm_thread.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <future>

#include <spdlog/spdlog.h>

#include "collectives/spin.h"

namespace tandem {

CommThread::CommThread(std::string group_name)
    : name_(std::move(group_name)), state_(std::make_shared<State>()) {
  thread_ = std::thread(&CommThread::loop, state_);
}

CommThread::~CommThread() {
  if (!shut_down_) shutdown(std::chrono::milliseconds(0));
}

void CommThread::submit(std::shared_ptr<CompletionWork> work, Task task) {
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->broken.empty()) {
      state_->queue.push_back({std::move(work), std::move(task)});
      state_->events.fetch_add(1, std::memory_order_release);
    } else {
      broken = state_->broken;
    }
  }
  if (broken.empty()) {
    state_->cv.notify_all();
    return;
  }
  // Fail at once: the op queued behind a stuck one would otherwise wait for nothing.
  work->finish(std::make_exception_ptr(CollectiveError(
      work->collective().describe() + " was not run: the process group is broken (" + broken + ")")));
}

void CommThread::break_group(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->broken.empty()) state_->broken = reason;
    state_->events.fetch_add(1, std::memory_order_release);
  }
  state_->cv.notify_all();
}

bool CommThread::broken() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return !state_->broken.empty();
}

void CommThread::run_inline(const Task& fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  // A barrier-like item with no work handle: it runs even on a broken group, since
  // callers use it for teardown.
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->queue.push_back({nullptr, [&fn, done] {
                               try {
                                 fn();
                                 done->set_value();
                               } catch (...) {
                                 done->set_exception(std::current_exception());
                               }
                             }});
    state_->events.fetch_add(1, std::memory_order_release);
  }
  state_->cv.notify_all();
  future.get();
}

void CommThread::loop(std::shared_ptr<State> state) {
  // A socket backend's write to a peer that is gone (Gloo writes with writev) then fails
  // with EPIPE, so the collective fails as for any lost peer, instead of SIGPIPE killing
  // the process: an elastic job's surviving ranks must live to join the next generation.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  std::unique_lock<std::mutex> lock(state->mutex);
  for (;;) {
    // Idle: the caller usually issues the next op within microseconds (a loop of small
    // collectives, the next bucket), so poll before parking; a wake-up costs more.
    if (state->queue.empty() && !state->stop) {
      const uint64_t seen = state->events.load(std::memory_order_acquire);
      lock.unlock();
      spin_until([&] { return state->events.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
    state->cv.wait(lock, [&] { return state->stop || !state->queue.empty(); });
    if (state->queue.empty()) break;  // stop requested and drained
    Item item = std::move(state->queue.front());
    state->queue.pop_front();
    if (item.work && !state->broken.empty()) {
      const std::string reason = state->broken;
      lock.unlock();
      item.work->finish(std::make_exception_ptr(CollectiveError(
          item.work->collective().describe() + " was not run: the process group is broken (" +
          reason + ")")));
      lock.lock();
      continue;
    }
    state->in_task = true;
    lock.unlock();
    std::exception_ptr error;
    bool breaks = false;
    try {
      item.task();
    } catch (const std::exception& e) {
      error = std::current_exception();
      breaks = item.work != nullptr;
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    // Out of the task before the work is finished: a caller woken by finish() may shut
    // the thread down at once, and must not take a failed op for one stuck in the engine.
    state->in_task = false;
    if (breaks && state->broken.empty()) state->broken = item.work->collective().describe() + " failed";
    if (item.work) {
      lock.unlock();
      item.work->finish(error);
      lock.lock();
    }
  }
  state->exited = true;
  state->cv.notify_all();
}

std::optional<std::chrono::nanoseconds> CommThread::cpu_time() const {
  if (shut_down_ || !thread_.joinable()) return std::nullopt;
  clockid_t clock;
  timespec ts{};
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &clock) != 0 ||
      clock_gettime(clock, &ts) != 0)
    return std::nullopt;
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

bool CommThread::shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return false;
  shut_down_ = true;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->events.fetch_add(1, std::memory_order_release);
  state_->cv.notify_all();
  // Stuck: inside the engine on a broken group, so it may never come back (a peer is
  // gone and MPI has no timeout). Everything else ends quickly once stop is set.
  const auto stuck = [&] { return state_->in_task && !state_->broken.empty(); };
  const auto finished = [&] { return state_->exited || stuck(); };
  state_->cv.wait_for(lock, grace, finished);
  if (!finished()) {
    if (state_->broken.empty()) {
      state_->broken = "the process group was shut down with collectives still running after " +
                       std::to_string(grace.count()) + " ms";
    }
    state_->cv.wait(lock, finished);
  }
  const bool exited = state_->exited;
  lock.unlock();
  if (exited) {
    thread_.join();
    return false;
  }
  spdlog::error("{}: a collective is still inside the engine at shutdown; abandoning its "
                "communication thread",
                name_);
  thread_.detach();
  return true;
}

}  // namespace tandem
