// Stopwatch for phase timing on a device's compute stream.
//
//   lap(times, &PhaseTimes::forward_ms)  marks the end of a phase and charges the time
//       since the previous mark to that field when `times` is resolved (after the
//       step). Nothing waits: a GPU step runs with no host synchronisation, and a
//       phase's time is still the time its kernels took, not the time to enqueue them.
//   lap_ms()  the time since the previous mark, read at once: it waits for the device.
//       For DataParallel, whose phases span several devices driven by host threads.
//
// On the CPU a mark is the host clock, so both read the same.
#pragma once

#include <memory>

#include "runtime/kernels.h"
#include "runtime/phase_times.h"

namespace tandem {

class Stopwatch {
 public:
  explicit Stopwatch(Kernels& kernels) : kernels_(kernels), last_(kernels.mark()) {}

  void lap(PhaseTimes& times, double PhaseTimes::*field) {
    auto now = kernels_.mark();
    times.defer(kernels_, last_, now, field);
    last_ = std::move(now);
  }

  double lap_ms() {
    auto now = kernels_.mark();
    const double ms = kernels_.elapsed_ms(*last_, *now);
    last_ = std::move(now);
    return ms;
  }

 private:
  Kernels& kernels_;
  std::shared_ptr<Kernels::TimeMark> last_;
};

}  // namespace tandem
