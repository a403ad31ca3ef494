// Stopwatch for phase timing. On a GPU device it synchronises the device's compute
// stream at each lap, so a phase's time is the time its kernels took, not the time
// to enqueue them (the trainer times phases only when asked to report them).
#pragma once

#include <chrono>

#include "runtime/kernels.h"

namespace tandem {

class Stopwatch {
 public:
  explicit Stopwatch(Kernels& kernels) : kernels_(kernels), last_(std::chrono::steady_clock::now()) {}
  // Milliseconds since construction or the previous lap.
  double lap_ms() {
    kernels_.synchronize();
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  Kernels& kernels_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace tandem
