// The outcome-watching thread (see header).
#include "launcher/outcome_watcher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::launcher {

namespace {
// The blocking get is cut into slices so the destructor's stop request is seen
// within one slice even if the key never appears.
constexpr std::chrono::milliseconds kGetSlice{1000};
}  // namespace

OutcomeWatcher::OutcomeWatcher(std::shared_ptr<Store> store, std::string key)
    : store_(std::move(store)), key_(std::move(key)) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw std::runtime_error(std::string("eventfd failed: ") + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

OutcomeWatcher::~OutcomeWatcher() {
  stop_ = true;
  thread_.join();
  close(event_fd_);
}

std::optional<OutcomeWatcher::Result> OutcomeWatcher::result() {
  std::lock_guard<std::mutex> lock(mutex_);
  return result_;
}

void OutcomeWatcher::run() {
  Result r;
  while (!stop_) {
    try {
      r.outcome = store_->get(key_, kGetSlice);
      break;
    } catch (const StoreTimeout&) {
      continue;
    } catch (const std::exception& e) {
      r.error = e.what();
      break;
    }
  }
  if (stop_ && r.outcome.empty() && r.error.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = r;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
}

}  // namespace tandem::launcher
