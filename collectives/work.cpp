// Work and CompletionWork (see work.h for the semantics).
#include "collectives/work.h"

#include "collectives/spin.h"

namespace tandem {

std::string Work::error_message() const {
  std::exception_ptr e = exception();
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

void CompletionWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    done_at_ = std::chrono::steady_clock::now();
    error_ = std::move(error);
    finished_.store(true, std::memory_order_release);
  }
  // No syscall when nobody parked: a waiter that spun saw finished_ instead.
  done_cv_.notify_all();
}

void CompletionWork::wait(std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  // A small op finishes within microseconds of the wait: poll before parking. A zero
  // timeout is a poll, so it does not spin.
  if (timeout.count() > 0) spin_until([this] { return finished_.load(std::memory_order_acquire); });
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) {
      lock.unlock();
      // Outside the lock: the reporter talks to the store and may take a while.
      throw CollectiveTimeout(on_timeout_ ? on_timeout_(collective_, timeout)
                                          : collective_.describe() + " timed out");
    }
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

std::optional<std::chrono::steady_clock::time_point> CompletionWork::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return std::nullopt;
  return done_at_;
}

bool CompletionWork::is_completed() const { return finished_.load(std::memory_order_acquire); }

std::exception_ptr CompletionWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

}  // namespace tandem
