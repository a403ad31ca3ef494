// StopSignal and the restart counters (see requeue.h).
#include "train/requeue.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "train/train_config.h"

namespace tandem {
namespace {

// Process-wide by nature (see the header); written only by the handler.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGUSR1 handler needs a lock-free flag");

void on_sigusr1(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

int read_count(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  int v = 0;
  const char* end = text + std::strlen(text);
  if (auto [p, ec] = std::from_chars(text, end, v); ec != std::errc() || p != end || v < 0 || v > (1 << 30))
    throw UsageError(std::string("environment variable ") + name + "='" + text +
                     "' is not an integer in [0, 1073741824]");
  return v;
}

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a step's reads and writes go on; the loop looks at its end
  if (sigaction(SIGUSR1, &sa, nullptr) != 0)
    throw std::runtime_error(std::string("cannot install the SIGUSR1 handler: ") + std::strerror(errno));
}

bool StopSignal::requested() const { return g_stop_requested.load(std::memory_order_relaxed); }

RestartCounts read_restart_counts() {
  RestartCounts r;
  r.restart_count = read_count("TANDEM_RESTART_COUNT");
  r.slurm_restart_count = read_count("SLURM_RESTART_COUNT");
  return r;
}

}  // namespace tandem
