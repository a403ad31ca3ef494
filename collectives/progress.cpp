// ProgressTracker (see progress.h for the design).
#include "collectives/progress.h"

#include <charconv>

#include <spdlog/spdlog.h>

namespace tandem {

namespace {
// Bounds every store call made for progress: a report must come back promptly even
// when the store's host is gone.
constexpr std::chrono::milliseconds kStoreTimeout{5000};
std::string seq_key(int rank) { return "seq/" + std::to_string(rank); }
}  // namespace

ProgressTracker::ProgressTracker(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {
  if (store_) publisher_ = std::thread(&ProgressTracker::publish_loop, this);
}

ProgressTracker::~ProgressTracker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

void ProgressTracker::entered(uint64_t seq) {
  entered_.store(seq, std::memory_order_release);
  if (store_) cv_.notify_one();  // no lock: a missed wake-up is caught by the next op or stop
}

void ProgressTracker::publish_loop() {
  std::shared_ptr<Store> store;
  try {
    // Its own connection, never queued behind a blocking get; short timeouts, so a
    // store that went away cannot hold up this thread (or the destructor joining it).
    store = store_->clone(kStoreTimeout);
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: cannot open a store connection to publish progress ({}); timeouts "
                 "will not name missing ranks",
                 rank_, e.what());
    return;
  }
  uint64_t published = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // wait_for, not wait: entered() notifies without the lock, so a wake-up can be
    // missed; the periodic check bounds the publishing lag in that case.
    cv_.wait_for(lock, std::chrono::milliseconds(200),
                 [&] { return stop_ || entered_.load(std::memory_order_acquire) != published; });
    const uint64_t now = entered_.load(std::memory_order_acquire);
    const bool stopping = stop_;
    if (now != published) {
      lock.unlock();
      try {
        store->set(seq_key(rank_), std::to_string(now));
        published = now;
      } catch (const std::exception& e) {
        // The store is gone (e.g. its host rank exited): progress stays unpublished.
        spdlog::debug("rank {}: publishing progress failed: {}", rank_, e.what());
        return;
      }
      lock.lock();
    }
    if (stopping) return;
  }
}

ProgressTracker::Report ProgressTracker::laggards(uint64_t seq) {
  Report report;
  if (!store_) {
    report.why_unknown = "no store to read the other ranks' progress from";
    return report;
  }
  try {
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!query_store_) query_store_ = store_->clone(kStoreTimeout);
      store = query_store_;
    }
    for (int r = 0; r < size_; ++r) {
      uint64_t last = 0;
      if (r == rank_) {
        last = entered_.load();
      } else if (auto value = store->try_get(seq_key(r))) {
        std::from_chars(value->data(), value->data() + value->size(), last);
      }
      if (last < seq) report.laggards.push_back({r, last});
    }
    report.known = true;
  } catch (const std::exception& e) {
    report.why_unknown = std::string("the store could not be read: ") + e.what();
  }
  return report;
}

std::string ProgressTracker::describe(const Report& report, const std::string& backend) {
  if (!report.known) return "which ranks have not reached it is unknown (" + report.why_unknown + ")";
  if (report.laggards.empty()) {
    return "every rank has entered it, so it is stuck or failed inside " + backend +
           " (a peer process died, or the network between ranks is down)";
  }
  std::string s = report.laggards.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < report.laggards.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(report.laggards[i].rank);
  }
  s += report.laggards.size() == 1 ? " has" : " have";
  s += " not reached it (";
  for (size_t i = 0; i < report.laggards.size(); ++i) {
    const Laggard& l = report.laggards[i];
    if (i) s += "; ";
    s += "rank " + std::to_string(l.rank) + ": " +
         (l.last_seq == 0 ? std::string("no collective entered yet")
                          : "last collective entered #" + std::to_string(l.last_seq));
  }
  return s + ")";
}

}  // namespace tandem
