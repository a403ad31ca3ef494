// The one merged analysis tandemrun prints when --hang-timeout-s fires: from every rank's
// heartbeat (collectives/health.h) and the flight-recorder dumps that came back
// (collectives/flight_recorder.h), what each rank is doing, and the first op at which
// the ranks' records disagree. A pure function, so tests give it exact inputs.
//
// Example: "no rank completed a training step for 12.1 s (--hang-timeout-s 10): rank 1
// stuck in allreduce #703 for 12.1 s (no heartbeat for 11.9 s: stopped or frozen);
// ranks 0, 2, 3 wait in allreduce #703 for 12.0 s; first divergence: none"
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "collectives/health.h"

namespace tandem::launcher {

struct HangInput {
  std::vector<PeerHealth> peers;          // every rank's heartbeat (known == false: none)
  std::map<int, std::string> dumps;       // rank -> flight-recorder JSON
  std::chrono::milliseconds stale_after{5000};
  std::chrono::milliseconds no_progress_for{0};
  std::chrono::milliseconds hang_timeout{0};
  int64_t now_unix_us = 0;                // for how long an op has been running
};

std::string analyse_hang(const HangInput& in);

// "none", or "#5 (rank 0: allreduce f32 4000 B; rank 1: allreduce f32 3996 B)": the
// first seq that two dumps record differently (op, dtype, bytes).
std::string first_divergence(const std::map<int, std::string>& dumps);

}  // namespace tandem::launcher
