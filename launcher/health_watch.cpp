// HealthWatch (see header).
#include "launcher/health_watch.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <map>
#include <stdexcept>

#include "collectives/health.h"
#include "collectives/untrusted_text.h"
#include "launcher/failure.h"
#include "launcher/hang_analysis.h"

namespace tandem::launcher {

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
}  // namespace

HealthWatch::HealthWatch(std::shared_ptr<Store> store, Options options) : store_(std::move(store)), o_(options) {
  // The workers' own settings (the same TANDEM_HEARTBEAT_MS reaches them); the
  // staleness threshold is bounded by the hang timeout so a stopped rank is stale by then.
  const HealthOptions h = health_options_for(o_.hang_timeout > milliseconds(0) ? o_.hang_timeout : std::chrono::minutes(10), o_.node);
  interval_ = h.interval;
  stale_after_ = h.stale_after;
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::runtime_error("eventfd failed");
  thread_ = std::thread(&HealthWatch::run, this);
}

HealthWatch::~HealthWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  close(event_fd_);
}

HealthWatch::Events HealthWatch::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  Events e = pending_;
  pending_.dump_now = false;
  pending_.hang.reset();
  pending_.node_lost.reset();
  return e;
}

void HealthWatch::notify() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
}

std::string HealthWatch::key(const std::string& name) const {
  return "tandem/" + std::to_string(o_.attempt) + "/default/" + name;
}

void HealthWatch::run() {
  auto last_progress = Clock::now();
  std::vector<int64_t> steps(static_cast<size_t>(o_.world_size), -1);
  bool warned = false, fired = false, node_fired = false;
  const std::string host = this_host();
  const auto started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    try {
      store_->set(key("health/node/" + std::to_string(o_.node)), host);
      if (o_.hang_timeout > milliseconds(0) && !fired) {
        std::string analysis = check_hang(last_progress, steps);
        if (!analysis.empty()) {
          fired = true;
          std::lock_guard<std::mutex> guard(mutex_);
          pending_.hang = analysis;
          notify();
        }
      }
      if (o_.node_lost_after > milliseconds(0) && o_.nnodes > 1 && !node_fired) {
        std::string lost = check_nodes(started);
        if (!lost.empty()) {
          node_fired = true;
          std::lock_guard<std::mutex> guard(mutex_);
          pending_.node_lost = lost;
          notify();
        }
      }
      warned = false;
    } catch (const std::exception& e) {
      if (!warned) spdlog::warn("health watch: the store is unreachable: {}", e.what());
      warned = true;
    }
    lock.lock();
    cv_.wait_for(lock, interval_, [&] { return stop_; });
  }
}

// Empty while every other node's heartbeat is fresh; else which node fell silent. A node
// that never wrote one counts from this watch's start.
std::string HealthWatch::check_nodes(Clock::time_point started) {
  std::vector<std::string> keys;
  for (int n = 0; n < o_.nnodes; ++n) keys.push_back(key("health/node/" + std::to_string(n)));
  const auto values = store_->read_aged(keys);
  const auto watched = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  for (int n = 0; n < o_.nnodes; ++n) {
    if (n == o_.node) continue;
    const milliseconds silent = values[n] ? values[n]->age : watched;
    if (silent <= o_.node_lost_after) continue;
    // "host pid P" from the launchers' registration (launcher/rendezvous.h).
    const auto who = store_->try_get("tandemrun/node/" + std::to_string(n));
    return "node " + std::to_string(n) + "'s tandemrun" + (who ? " (" + escape_untrusted(*who) + ")" : std::string()) +
           (values[n] ? " stopped writing its heartbeat to the store " : " wrote no heartbeat to the store for ") +
           std::to_string(silent.count() / 1000) + " s" + (values[n] ? " ago" : "") +
           ": it was killed, or its host or its link to the store went down";
  }
  return {};
}

// Empty while steps progress; the analysis once they have not for --hang-timeout-s.
std::string HealthWatch::check_hang(Clock::time_point& last_progress, std::vector<int64_t>& steps) {
  std::vector<std::string> keys;
  for (int r = 0; r < o_.world_size; ++r) keys.push_back(key("health/" + std::to_string(r)));
  auto read_peers = [&] {
    std::vector<PeerHealth> peers(static_cast<size_t>(o_.world_size));
    const auto values = store_->read_aged(keys);
    for (int r = 0; r < o_.world_size; ++r) {
      peers[r].rank = r;
      if (values[r] && RankHealth::decode(values[r]->value, peers[r])) peers[r].age = values[r]->age;
      peers[r].rank = r;
    }
    return peers;
  };
  std::vector<PeerHealth> peers = read_peers();
  for (int r = 0; r < o_.world_size; ++r) {
    if (peers[r].known && peers[r].step != steps[r]) {
      steps[r] = peers[r].step;
      last_progress = Clock::now();
    }
  }
  const auto stalled = std::chrono::duration_cast<milliseconds>(Clock::now() - last_progress);
  if (stalled < o_.hang_timeout) return {};

  spdlog::error("no rank completed a training step for {:.1f} s (--hang-timeout-s): asking every rank for its "
                "flight recorder",
                static_cast<double>(stalled.count()) / 1000.0);
  std::vector<std::string> dump_keys;
  for (int r = 0; r < o_.world_size; ++r) {
    dump_keys.push_back(key("flight/" + std::to_string(r)));
    store_->delete_key(dump_keys.back());  // an older dump (an earlier SIGUSR2) is not this one
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    pending_.dump_now = true;
    notify();
  }
  // Ranks still responding dump within a heartbeat or two; frozen ones never will.
  const auto deadline = Clock::now() + 3 * interval_ + milliseconds(1000);
  std::map<int, std::string> dumps;
  for (;;) {
    const auto values = store_->read_aged(dump_keys);
    dumps.clear();
    size_t expected = 0;
    for (int r = 0; r < o_.world_size; ++r) {
      if (values[r]) dumps[r] = values[r]->value;
      expected += peers[r].known && peers[r].age <= stale_after_;
    }
    if (dumps.size() >= expected || Clock::now() >= deadline) break;
    std::unique_lock<std::mutex> lock(mutex_);
    if (cv_.wait_for(lock, milliseconds(100), [&] { return stop_; })) return {};
  }
  peers = read_peers();
  HangInput in;
  in.peers = peers;
  in.dumps = dumps;
  in.stale_after = stale_after_;
  in.no_progress_for = std::chrono::duration_cast<milliseconds>(Clock::now() - last_progress);
  in.hang_timeout = o_.hang_timeout;
  in.now_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return analyse_hang(in);
}

}  // namespace tandem::launcher
