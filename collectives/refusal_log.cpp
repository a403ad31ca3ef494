// Rate-limited refusal lines of the store server (see refusal_log.h).
#include "collectives/refusal_log.h"

#include <spdlog/spdlog.h>

namespace tandem {

void RefusalLog::refused(const std::string& peer, const std::string& why) {
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= kWindow) {
    flush();
    window_start_ = now;
    logged_in_window_ = 0;
  }
  if (logged_in_window_ < kLinesPerWindow) {
    ++logged_in_window_;
    spdlog::warn("store server: refused connection from {}: {}", peer, why);
    return;
  }
  ++unlogged_;
  last_peer_ = peer;
}

void RefusalLog::flush() {
  if (unlogged_ == 0) return;
  spdlog::warn("store server: refused {} more connection{} not logged one by one (the last from {})", unlogged_,
               unlogged_ == 1 ? "" : "s", last_peer_);
  unlogged_ = 0;
}

}  // namespace tandem
