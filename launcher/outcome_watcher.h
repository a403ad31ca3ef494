// A thread that blocks on the store until an attempt's outcome key appears (set by
// whichever node saw the first failure, or by the last node to succeed), then wakes
// the main loop through an eventfd. This is how a failure on one node stops the
// workers on every other node.
// Invariant: the thread never touches the launcher's state; it only publishes one
// result (the outcome value, or the store error that ended the watch) under a mutex.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "collectives/store.h"

namespace tandem::launcher {

class OutcomeWatcher {
 public:
  struct Result {
    std::string outcome;  // "ok" | "failed" | "stopped"; empty when `error` is set
    std::string error;    // the store went away
  };

  // `store` must be a connection of its own: the thread holds it while blocked.
  OutcomeWatcher(std::shared_ptr<Store> store, std::string key);
  ~OutcomeWatcher();  // stops the thread (within one wait slice) and joins it
  OutcomeWatcher(const OutcomeWatcher&) = delete;
  OutcomeWatcher& operator=(const OutcomeWatcher&) = delete;

  int fd() const { return event_fd_; }  // readable once result() has a value
  std::optional<Result> result();

 private:
  void run();

  std::shared_ptr<Store> store_;
  std::string key_;
  int event_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::optional<Result> result_;
  std::thread thread_;
};

}  // namespace tandem::launcher
