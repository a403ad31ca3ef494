// RankHealth: every rank's heartbeat, and the verdict a rank forms from everyone's when
// one of its collectives times out or fails.
//
// Design: a heartbeat thread (never the training thread) writes "health/<rank>" =
// "node=N pid=P host=H entered=E completed=C step=S" to the store every interval, and
// at once when the issuing thread enters an op (entered() only stores an atomic and
// wakes the thread, so the fast path never blocks or touches the network; bursts of
// ops coalesce into one write). The store remembers when each key was last written
// (Store::read_aged), so staleness is measured on one clock, the server's. tandemrun
// writes "health/node/<n>" for each node it runs, so a rank can tell a node that is cut
// off (its launcher is silent too) from a rank that froze.
//
// Verdict for op #S, per rank (the first that applies):
//   gone          its pid no longer exists (same host), or the launcher reported it dead
//   unreachable   its heartbeat and its node's launcher heartbeat are both stale
//   frozen        its heartbeat is stale: entered #S and stopped, or stopped before it
//   not reached   it has not entered #S (its last op is named)
//   waiting       entered #S, not completed
//   completed     completed #S
// Invariant: entered/completed/step_done never block; every store call made here has a
// short deadline, so a verdict comes back promptly even when the store's host is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/collectives/store.h"

namespace spdlog {
class logger;
}

namespace tandem {

struct HealthOptions {
  int node = -1;  // NODE_RANK, -1 when unknown (the heartbeat then names the host)
  // How often the heartbeat is written; TANDEM_HEARTBEAT_MS overrides it. A heartbeat
  // older than `stale_after` (at least 3 intervals) means the rank stopped responding.
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds stale_after{5000};
};

// Interval and staleness threshold for a group whose collectives time out after
// `timeout`: at most a fifth of the timeout apart, so a frozen rank is stale by the time
// its peers give up. Reads TANDEM_HEARTBEAT_MS.
HealthOptions health_options_for(std::chrono::milliseconds timeout, int node);

// What one rank's heartbeat says, as read by another.
struct PeerHealth {
  int rank = 0;
  bool known = false;  // false: no heartbeat yet (never started, or the store is unreachable)
  int node = -1;
  int64_t pid = 0;
  std::string host;
  uint64_t entered = 0;    // seq of the last op it issued
  uint64_t completed = 0;  // seq of the last op it completed
  int64_t step = 0;        // last training step it completed (0: none reported)
  std::chrono::milliseconds age{0};       // since its heartbeat was last written
  std::chrono::milliseconds node_age{-1};  // since its node's launcher wrote; -1: no launcher key
  bool gone = false;      // its process no longer exists
};

// One rank's verdict for an op.
enum class RankState : uint8_t { completed, waiting, not_reached, frozen, gone, unreachable, unknown };

class RankHealth {
 public:
  // `store` (already prefixed for this group) may be null: health is then unknown.
  // `on_beat` (optional) runs on the heartbeat thread after each beat, with that
  // thread's store connection (null while the store is unreachable).
  RankHealth(std::shared_ptr<Store> store, int rank, int size, HealthOptions options,
             std::function<void(Store*)> on_beat = {});
  ~RankHealth();
  RankHealth(const RankHealth&) = delete;
  RankHealth& operator=(const RankHealth&) = delete;

  // Called by the issuing thread for each op, seq increasing.
  void entered(uint64_t seq);
  // Called by whichever thread completes op `seq` (completion is in issue order).
  void completed(uint64_t seq);
  // The training loop finished `step`: tandemrun --hang-timeout-s watches this.
  void step_done(int64_t step);
  // Blocks (up to `timeout`) until the heartbeat thread has written what was entered
  // and completed so far. For fault injection and tests; false if it could not.
  bool flush(std::chrono::milliseconds timeout);

  uint64_t last_entered() const { return entered_.load(std::memory_order_acquire); }
  uint64_t last_completed() const { return completed_.load(std::memory_order_acquire); }
  const HealthOptions& options() const { return options_; }

  struct Report {
    bool known = false;
    std::string why_unknown;       // "the store at ... is unreachable: ..."
    std::vector<PeerHealth> peers;  // every rank, this one included
  };
  Report read();

  // "rank 1 (node 0, pid 4711) entered it and then stopped responding (no heartbeat for
  // 9.8 s); ranks 0, 2-3 are waiting in it": every rank's state for op `seq`.
  std::string explain(uint64_t seq, const std::string& backend);
  static RankState state_of(const PeerHealth& p, uint64_t seq, std::chrono::milliseconds stale_after);
  static std::string explain(const Report& report, uint64_t seq, const std::string& backend,
                             std::chrono::milliseconds stale_after);

  // The value written under health/<rank>, and its parser (false when malformed).
  static std::string encode(const PeerHealth& p);
  static bool decode(const std::string& value, PeerHealth& out);

 private:
  void beat_loop();
  void wake_beater();
  PeerHealth self() const;

  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const HealthOptions options_;
  std::function<void(Store*)> on_beat_;
  // The heartbeat thread logs through its own reference: a group the program never
  // destroyed (exit() with it alive) may still beat while static destructors run, after
  // spdlog's registry is gone.
  std::shared_ptr<spdlog::logger> log_;
  const int64_t pid_;
  std::string host_;
  std::atomic<uint64_t> entered_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> changes_{0};    // bumped by every entered/completed/step_done
  std::atomic<uint64_t> published_{0};  // changes_ as of the last successful write
  std::mutex mutex_;
  std::condition_variable cv_;          // wakes the heartbeat thread
  // True while the heartbeat thread waits for a change: only then does an op wake it (a
  // wake-up per op would cost the op a syscall; during the coalescing gap it is not needed).
  std::atomic<bool> wants_change_{false};
  std::condition_variable published_cv_;
  bool stop_ = false;
  std::shared_ptr<Store> query_store_;  // lazily cloned, guarded by mutex_
  std::thread beater_;
};

// "0, 2, 3" for {0, 2, 3}; "0, 2-4, 7" for {0, 2, 3, 4, 7}: a run of three or more as a range.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace tandem
