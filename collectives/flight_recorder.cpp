// FlightRecorder (see flight_recorder.h).
#include "collectives/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace tandem {

namespace {
// Process-wide by nature: a signal reaches the process, not a group. The handler only
// bumps this counter; recorders compare it with what they last saw.
std::atomic<uint64_t> g_dump_requests{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the dump signals' handler needs a lock-free counter");

void on_dump_signal(int) { g_dump_requests.fetch_add(1, std::memory_order_relaxed); }

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // SIGUSR2 is the dump signal (tandemrun's hang analysis sends it); SIGUSR1 too where
    // the program leaves it alone (tandem-train takes it to stop, to be resumed).
    for (int sig : {SIGUSR2, SIGUSR1}) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) != 0) continue;
      if (old.sa_handler != SIG_DFL) continue;  // the program handles it itself
      struct sigaction sa {};
      sa.sa_handler = on_dump_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(sig, &sa, nullptr);
    }
  });
}

size_t capacity_from_env() {
  const char* env = std::getenv("TANDEM_FLIGHT_RECORDER_SIZE");
  if (!env || !*env) return 2048;
  size_t n = 0;
  const char* end = env + std::strlen(env);
  if (auto [p, ec] = std::from_chars(env, end, n); ec != std::errc() || p != end || n > (1u << 24)) {
    spdlog::warn("ignoring TANDEM_FLIGHT_RECORDER_SIZE='{}' (expected 0..16777216)", env);
    return 2048;
  }
  return n;
}

const char* state_name(uint8_t s) {
  static const char* names[] = {"empty", "queued", "running", "completed", "failed"};
  return names[s];
}
}  // namespace

FlightRecorder::FlightRecorder(FlightIdentity identity)
    : id_(std::move(identity)), log_(spdlog::default_logger()), ring_(capacity_from_env()) {
  install_handler_once();
  seen_requests_ = g_dump_requests.load(std::memory_order_relaxed);
}

FlightRecorder::~FlightRecorder() = default;

FlightRecorder::Entry* FlightRecorder::find(uint64_t seq) {
  if (ring_.empty()) return nullptr;
  Entry& e = ring_[seq % ring_.size()];
  return e.seq == seq && e.state != State::empty ? &e : nullptr;
}

void FlightRecorder::enqueued(const Collective& c) {
  if (ring_.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = ring_[c.seq % ring_.size()];
  e = Entry{c.seq, c.op, c.dtype(), c.bytes(), std::chrono::steady_clock::now(), {}, {}, State::queued};
  ++recorded_;
}

void FlightRecorder::started(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(seq); e && e->state == State::queued) {
    e->started = std::chrono::steady_clock::now();
    e->state = State::running;
  }
}

void FlightRecorder::ended(uint64_t seq, bool ok) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(seq); e && (e->state == State::queued || e->state == State::running)) {
    e->ended = std::chrono::steady_clock::now();
    if (e->started == std::chrono::steady_clock::time_point{}) e->started = e->ended;
    e->state = ok ? State::completed : State::failed;
  }
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  using namespace std::chrono;
  const auto steady_now = steady_clock::now();
  const int64_t unix_now = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  const auto unix_us = [&](steady_clock::time_point t) -> nlohmann::json {
    if (t == steady_clock::time_point{}) return nullptr;
    return unix_now - duration_cast<microseconds>(steady_now - t).count();
  };
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  nlohmann::json j;
  j["format"] = "tandem-flight-recorder";
  j["version"] = 1;
  j["rank"] = id_.rank;
  j["world_size"] = id_.world_size;
  j["node"] = id_.node;
  j["host"] = host;
  j["pid"] = static_cast<int64_t>(getpid());
  j["backend"] = id_.backend;
  j["reason"] = reason;
  j["dumped_at_unix_us"] = unix_now;
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    j["capacity"] = ring_.size();
    j["recorded"] = recorded_;
    for (const Entry& e : ring_) {
      if (e.state != State::empty) entries.push_back(e);
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  auto& out = j["entries"] = nlohmann::json::array();
  for (const Entry& e : entries) {
    out.push_back({{"seq", e.seq},
                   {"op", op_str(e.op)},
                   {"dtype", dtype_name(e.dtype)},
                   {"bytes", e.bytes},
                   {"enqueued_unix_us", unix_us(e.enqueued)},
                   {"started_unix_us", unix_us(e.started)},
                   {"ended_unix_us", unix_us(e.ended)},
                   {"state", state_name(static_cast<uint8_t>(e.state))}});
  }
  return j.dump();
}

std::string FlightRecorder::dump(const std::string& reason) const {
  try {
    const std::string text = to_json(reason);
    if (const char* dir = std::getenv("TANDEM_LOG_DIR"); dir && *dir) {
      const std::string path = std::string(dir) + "/flight-rank" + std::to_string(id_.rank) + ".json";
      // 0600: a dump names the job's ops and timings; fchmod also narrows a file left
      // by an earlier attempt.
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      bool written = fd >= 0 && fchmod(fd, 0600) == 0;
      const std::string line = text + '\n';
      for (size_t done = 0; written && done < line.size();) {
        const ssize_t n = write(fd, line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR) continue;
        written = n > 0;
        if (written) done += static_cast<size_t>(n);
      }
      if (fd >= 0) close(fd);
      if (written) {
        log_->error("rank {}: flight recorder ({}) written to {}", id_.rank, reason, path);
        return path;
      }
      log_->error("rank {}: cannot write the flight recorder to {}; writing it to stderr", id_.rank, path);
    }
    std::fprintf(stderr, "tandem flight recorder (rank %d, %s): %s\n", id_.rank, reason.c_str(), text.c_str());
    std::fflush(stderr);
    return "stderr";
  } catch (const std::exception& e) {
    log_->error("rank {}: flight recorder dump failed: {}", id_.rank, e.what());
    return "";
  }
}

bool FlightRecorder::dump_requested() {
  const uint64_t now = g_dump_requests.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  if (now == seen_requests_) return false;
  seen_requests_ = now;
  return true;
}

}  // namespace tandem
