// RankHealth (see health.h for the design).
#include "collectives/health.h"

#include "collectives/process_liveness.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <sstream>

#include <spdlog/spdlog.h>

// Every program that can send heartbeats carries this section, so tandemrun can tell it
// from one that cannot before --hang-timeout-s relies on them (launcher/program_kind.h).
// `retain` keeps it through --gc-sections; the name is the contract, the text a label.
extern "C" __attribute__((used, retain, section("tandem_heartbeats"))) const char tandem_heartbeats_marker[] =
    "sends Tandem heartbeats (collectives/health.h)";

namespace tandem {

namespace {
using std::chrono::milliseconds;
// Bounds every store call made for health: a verdict must come back promptly even when
// the store's host is gone.
constexpr milliseconds kStoreTimeout{3000};
// Writes closer together than this coalesce: the verdict needs seconds, not microseconds.
constexpr milliseconds kMinGap{20};

std::string health_key(int rank) { return "health/" + std::to_string(rank); }
std::string node_key(int node) { return "health/node/" + std::to_string(node); }

std::string seconds(milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}


std::string who(const PeerHealth& p) {
  std::string s = "rank " + std::to_string(p.rank);
  if (!p.known) return s;
  s += p.node >= 0 ? " (node " + std::to_string(p.node) : " (host " + p.host;
  return s + ", pid " + std::to_string(p.pid) + ")";
}
}  // namespace

HealthOptions health_options_for(milliseconds timeout, int node) {
  HealthOptions o;
  o.node = node;
  milliseconds interval{1000};
  if (const char* env = std::getenv("TANDEM_HEARTBEAT_MS"); env && *env) {
    int ms = 0;
    const char* end = env + std::strlen(env);
    if (auto [p, ec] = std::from_chars(env, end, ms); ec == std::errc() && p == end && ms >= 10) {
      interval = milliseconds(ms);
    } else {
      spdlog::warn("ignoring TANDEM_HEARTBEAT_MS='{}' (expected milliseconds >= 10)", env);
    }
  }
  o.interval = std::max(milliseconds(10), std::min(interval, timeout / 5));
  o.stale_after = std::max(3 * o.interval, std::min(milliseconds(5000), timeout / 2));
  return o;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

RankHealth::RankHealth(std::shared_ptr<Store> store, int rank, int size, HealthOptions options,
                       std::function<void(Store*)> on_beat)
    : store_(std::move(store)), rank_(rank), size_(size), options_(options), on_beat_(std::move(on_beat)),
      log_(spdlog::default_logger()), pid_(getpid()) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  if (store_) beater_ = std::thread(&RankHealth::beat_loop, this);
}

RankHealth::~RankHealth() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (beater_.joinable()) beater_.join();
}

void RankHealth::wake_beater() {
  // No lock: a missed wake-up only delays the write to the next interval. Only the first
  // change after a write wakes the thread; it coalesces the rest.
  if (store_ && wants_change_.load(std::memory_order_relaxed) && wants_change_.exchange(false)) {
    cv_.notify_one();
  }
}

void RankHealth::entered(uint64_t seq) {
  entered_.store(seq, std::memory_order_release);
  changes_.fetch_add(1, std::memory_order_release);
  wake_beater();
}

void RankHealth::completed(uint64_t seq) {
  completed_.store(seq, std::memory_order_release);
  changes_.fetch_add(1, std::memory_order_release);
  wake_beater();
}

void RankHealth::step_done(int64_t step) {
  step_.store(step, std::memory_order_release);
  changes_.fetch_add(1, std::memory_order_release);
  wake_beater();
}

bool RankHealth::flush(milliseconds timeout) {
  if (!store_) return false;
  const uint64_t want = changes_.load(std::memory_order_acquire);
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.notify_all();
  return published_cv_.wait_for(lock, timeout, [&] { return published_.load() >= want; });
}

PeerHealth RankHealth::self() const {
  PeerHealth p;
  p.rank = rank_;
  p.known = true;
  p.node = options_.node;
  p.pid = pid_;
  p.host = host_;
  p.entered = entered_.load(std::memory_order_acquire);
  p.completed = completed_.load(std::memory_order_acquire);
  p.step = step_.load(std::memory_order_acquire);
  return p;
}

std::string RankHealth::encode(const PeerHealth& p) {
  return "node=" + std::to_string(p.node) + " pid=" + std::to_string(p.pid) + " host=" + p.host +
         " entered=" + std::to_string(p.entered) + " completed=" + std::to_string(p.completed) +
         " step=" + std::to_string(p.step);
}

bool RankHealth::decode(const std::string& value, PeerHealth& out) {
  std::istringstream in(value);
  std::string field;
  int seen = 0;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) return false;
    const std::string name = field.substr(0, eq);
    const std::string v = field.substr(eq + 1);
    const auto num = [&](auto& dst) {
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), dst);
      return ec == std::errc() && p == v.data() + v.size();
    };
    bool ok = true;
    if (name == "node") ok = num(out.node);
    else if (name == "pid") ok = num(out.pid);
    else if (name == "host") out.host = v;
    else if (name == "entered") ok = num(out.entered);
    else if (name == "completed") ok = num(out.completed);
    else if (name == "step") ok = num(out.step);
    else continue;  // a later version's field
    if (!ok) return false;
    ++seen;
  }
  out.known = seen == 6;
  return out.known;
}

void RankHealth::beat_loop() {
  std::shared_ptr<Store> store;
  bool warned = false;
  uint64_t written = 0;
  auto last_write = std::chrono::steady_clock::time_point{};
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wants_change_.store(true);
    cv_.wait_for(lock, options_.interval, [&] {
      return stop_ || changes_.load(std::memory_order_acquire) != written;
    });
    wants_change_.store(false);
    if (stop_) break;
    // Coalesce a burst of ops into one write.
    const auto since = std::chrono::steady_clock::now() - last_write;
    if (since < kMinGap) {
      cv_.wait_for(lock, kMinGap - since, [&] { return stop_; });
      if (stop_) break;
    }
    const uint64_t snapshot = changes_.load(std::memory_order_acquire);
    lock.unlock();
    try {
      // Its own connection, never queued behind a blocking call; short deadlines, so a
      // store that went away cannot hold up this thread (or the destructor joining it).
      if (!store) store = store_->clone(kStoreTimeout);
      store->set(health_key(rank_), encode(self()));
      written = snapshot;
      last_write = std::chrono::steady_clock::now();
      if (warned) log_->info("rank {}: heartbeat: the store is reachable again", rank_);
      warned = false;
    } catch (const std::exception& e) {
      // The store is gone or cut off: keep trying each interval, so a link that comes
      // back brings the heartbeat back.
      if (!warned) log_->warn("rank {}: heartbeat: cannot write to the store: {}", rank_, e.what());
      warned = true;
      store.reset();
      written = snapshot;  // do not spin: retry on the next interval or change
    }
    if (on_beat_) on_beat_(store.get());
    lock.lock();
    if (!warned) published_.store(snapshot, std::memory_order_release);
    published_cv_.notify_all();
  }
}

RankHealth::Report RankHealth::read() {
  Report report;
  if (!store_) {
    report.why_unknown = "this group has no store to read the other ranks' heartbeats from";
    return report;
  }
  try {
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!query_store_) query_store_ = store_->clone(kStoreTimeout);
      store = query_store_;
    }
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(health_key(r));
    const auto values = store->read_aged(keys);
    std::map<int, milliseconds> node_ages;
    for (int r = 0; r < size_; ++r) {
      PeerHealth p;
      if (r == rank_) {
        p = self();
      } else if (values[r] && decode(values[r]->value, p)) {
        p.age = values[r]->age;
        if (p.host == host_) p.gone = process_gone(p.pid);
      }
      p.rank = r;
      if (p.known && p.node >= 0) node_ages[p.node] = milliseconds(-1);
      report.peers.push_back(p);
    }
    if (!node_ages.empty()) {
      std::vector<std::string> nk;
      for (const auto& [n, age] : node_ages) nk.push_back(node_key(n));
      const auto nodes = store->read_aged(nk);
      size_t i = 0;
      for (auto& [n, age] : node_ages) {
        if (nodes[i]) age = nodes[i]->age;
        ++i;
      }
      for (auto& p : report.peers) {
        if (p.known && p.node >= 0 && p.rank != rank_) p.node_age = node_ages[p.node];
      }
    }
    report.known = true;
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      query_store_.reset();  // a later read reconnects
    }
    report.why_unknown = std::string("the store is unreachable: ") + e.what();
  }
  return report;
}

RankState RankHealth::state_of(const PeerHealth& p, uint64_t seq, milliseconds stale_after) {
  if (!p.known) return RankState::unknown;
  if (p.gone) return RankState::gone;
  if (p.age > stale_after) {
    return p.node_age > stale_after ? RankState::unreachable : RankState::frozen;
  }
  if (p.completed >= seq) return RankState::completed;
  if (p.entered < seq) return RankState::not_reached;
  return RankState::waiting;
}

std::string RankHealth::explain(uint64_t seq, const std::string& backend) {
  return explain(read(), seq, backend, options_.stale_after);
}

std::string RankHealth::explain(const Report& report, uint64_t seq, const std::string& backend,
                                milliseconds stale_after) {
  if (!report.known) return "which ranks are at fault is unknown (" + report.why_unknown + ")";
  std::vector<std::string> faults;
  std::vector<int> waiting, completed;
  std::map<int, std::vector<int>> unreachable;  // node -> ranks
  std::map<int, milliseconds> unreachable_age;
  for (const PeerHealth& p : report.peers) {
    const std::string last = p.entered == 0 ? std::string("it has entered no collective yet")
                                            : "its last collective is #" + std::to_string(p.entered);
    switch (state_of(p, seq, stale_after)) {
      case RankState::waiting: waiting.push_back(p.rank); break;
      case RankState::completed: completed.push_back(p.rank); break;
      case RankState::not_reached: faults.push_back(who(p) + " has not reached it (" + last + ")"); break;
      case RankState::frozen:
        faults.push_back(who(p) + (p.entered >= seq ? " entered it and then stopped responding"
                                                    : " stopped responding before reaching it") +
                         " (no heartbeat for " + seconds(p.age) + (p.entered >= seq ? "" : "; " + last) + ")");
        break;
      case RankState::gone:
        faults.push_back(who(p) + " is gone: its process no longer exists (" + last + ")");
        break;
      case RankState::unreachable:
        unreachable[p.node].push_back(p.rank);
        unreachable_age[p.node] = std::max(unreachable_age[p.node], p.node_age);
        break;
      case RankState::unknown:
        faults.push_back("rank " + std::to_string(p.rank) + " has published no heartbeat");
        break;
    }
  }
  for (const auto& [node, ranks] : unreachable) {
    faults.push_back(std::string(ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks) + " on node " +
                     std::to_string(node) + (ranks.size() == 1 ? " is" : " are") + " unreachable: node " +
                     std::to_string(node) + " has not been heard from for " + seconds(unreachable_age[node]) +
                     " (its network link or its connection to the store is down)");
  }
  std::string s;
  for (const auto& f : faults) s += (s.empty() ? "" : "; ") + f;
  if (!waiting.empty()) {
    s += (s.empty() ? "" : "; ") + std::string(waiting.size() == 1 ? "rank " : "ranks ") + rank_list(waiting) +
         (waiting.size() == 1 ? " is" : " are") + " waiting in it";
  }
  if (!completed.empty()) {
    s += (s.empty() ? "" : "; ") + std::string(completed.size() == 1 ? "rank " : "ranks ") + rank_list(completed) +
         (completed.size() == 1 ? " has" : " have") + " completed it";
  }
  if (faults.empty()) {
    s = "every rank entered it and is still responding, so it is stuck or failed inside " + backend +
        " (a peer process died, or the network between ranks is down); " + s;
  }
  return s;
}

}  // namespace tandem
