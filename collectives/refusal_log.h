// The store server's log of refused connections, rate-limited: the first few refusals
// of each window are logged one per line with the peer's address and why; the rest
// are counted and summarised in one line when the next window opens (or at flush()),
// so a flood of bad handshakes costs the log a few lines a window, never one each.
// Invariant: every refusal is either logged on its own line or counted in a summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem {

class RefusalLog {
 public:
  static constexpr int kLinesPerWindow = 5;
  static constexpr std::chrono::seconds kWindow{10};

  void refused(const std::string& peer, const std::string& why);
  // Logs the count not yet logged, if any (the server calls it when it stops).
  void flush();

 private:
  std::chrono::steady_clock::time_point window_start_{};
  int logged_in_window_ = 0;
  int64_t unlogged_ = 0;
  std::string last_peer_;
};

}  // namespace tandem
