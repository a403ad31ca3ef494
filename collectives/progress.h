// ProgressTracker: lets a rank whose collective timed out say which ranks never
// reached it.
//
// Design: each rank publishes "seq/<rank>" = the sequence number of the last
// collective it issued. Publishing synchronously would add a store round trip to
// every op, so the issuing thread only stores the number in an atomic and wakes a
// publisher thread, which writes the latest value on its own store connection;
// bursts of ops coalesce into one write. Published progress therefore lags by at
// most one store round trip, far below any collective timeout. Only on a timeout
// or failure does a rank read its peers' keys (laggards()).
// Invariant: the fast path (entered) never blocks and never touches the network.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store.h"

namespace tandem {

class ProgressTracker {
 public:
  // `store` (already prefixed for this group) may be null: progress is then unknown.
  ProgressTracker(std::shared_ptr<Store> store, int rank, int size);
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  // Called by the issuing thread for each op, seq increasing.
  void entered(uint64_t seq);

  struct Laggard {
    int rank;
    uint64_t last_seq;  // 0: has not entered any collective
  };
  struct Report {
    bool known = false;  // false without a store or when it could not be read
    std::string why_unknown;
    std::vector<Laggard> laggards;  // ranks whose last published seq < the op's seq
  };
  Report laggards(uint64_t seq);

  // "rank 1 has not reached it (its last collective is #4)" and the like.
  static std::string describe(const Report& report, const std::string& backend);

 private:
  void publish_loop();

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::atomic<uint64_t> entered_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::shared_ptr<Store> query_store_;  // lazily cloned, guarded by mutex_
  std::thread publisher_;
};

}  // namespace tandem
