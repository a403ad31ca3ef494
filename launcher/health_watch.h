// HealthWatch: tandemrun's side of rank health (collectives/health.h), one thread per
// attempt with its own store connection. Every heartbeat interval it
//   - writes this node's heartbeat, "tandem/<attempt>/default/health/node/<n>", which lets
//     a rank tell a node that is cut off (launcher silent too) from a frozen rank;
//   - with --hang-timeout-s S, reads every rank's heartbeat, and when no rank's step has
//     moved for S seconds: asks the main loop to send SIGUSR2 to the local workers (each
//     dumps its flight recorder, also into the store as "flight/<rank>"), waits a few
//     heartbeats for the dumps of the ranks still responding, and hands the main loop
//     one analysis (launcher/hang_analysis.h). Every node detects the hang from the same
//     heartbeats; the first analysis published becomes the attempt's failure;
//   - with a node_lost_after (--rdzv-endpoint: the store outlives any node), reads every
//     other node's heartbeat, and hands the main loop a report naming the first node
//     whose heartbeat is older than that (its tandemrun was killed, or its host or link
//     went down), which becomes the attempt's failure like a hang.
// Invariant: the thread never touches the launcher's state; it publishes through an
// eventfd and a mutex-guarded result, like OutcomeWatcher.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "collectives/store.h"

namespace tandem::launcher {

class HealthWatch {
 public:
  struct Options {
    int node = 0;
    int world_size = 1;
    int attempt = 0;
    std::chrono::milliseconds hang_timeout{0};  // 0: only the node heartbeat
    int nnodes = 1;
    std::chrono::milliseconds node_lost_after{0};  // 0: other nodes are not watched
  };
  // `store` must be a connection of its own (unprefixed).
  HealthWatch(std::shared_ptr<Store> store, Options options);
  ~HealthWatch();  // stops and joins the thread
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

  int fd() const { return event_fd_; }  // readable when take() has something
  struct Events {
    bool dump_now = false;             // send SIGUSR2 to the local workers
    std::optional<std::string> hang;   // the analysis: end the attempt
    std::optional<std::string> node_lost;  // which node went silent: end the attempt
  };
  Events take();

 private:
  void run();
  void notify();
  std::string key(const std::string& name) const;
  std::string check_nodes(std::chrono::steady_clock::time_point started);
  std::string check_hang(std::chrono::steady_clock::time_point& last_progress, std::vector<int64_t>& steps);

  std::shared_ptr<Store> store_;
  Options o_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds stale_after_;
  int event_fd_ = -1;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  Events pending_;
  std::thread thread_;
};

}  // namespace tandem::launcher
