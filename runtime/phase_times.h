// PhaseTimes: where a training step's time went (forward, backward, communication, the
// optimizer). Filled by the strategies (runtime/strategy/) through a Stopwatch
// (runtime/timer.h), read by the trainer's log and summary. Below the strategies so that
// the stopwatch, which knows only Kernels, needs nothing of them.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tandem/runtime/kernels.h"

namespace tandem {

// Per-step phase times in milliseconds. comm_ms is the time gradient communication
// was in flight (host-observed: on nccl, whose completions the host never sees inside a
// step, the span from the first launch to the end of backward); exposed_comm_ms the
// part the compute stream waited for it.
//
// Phases timed on a device arrive as pending laps (Stopwatch::lap) and are added by
// resolve(), which the caller runs once the step's work is queued; it waits for the
// device only then, so nothing inside a step synchronises for timing.
struct PhaseTimes {
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, exposed_comm_ms = 0, optimizer_ms = 0;

  struct PendingLap {
    Kernels* kernels;
    std::shared_ptr<Kernels::TimeMark> from, to;
    double PhaseTimes::*field;
  };
  std::vector<PendingLap> pending;

  void defer(Kernels& k, std::shared_ptr<Kernels::TimeMark> from, std::shared_ptr<Kernels::TimeMark> to,
             double PhaseTimes::*field) {
    pending.push_back({&k, std::move(from), std::move(to), field});
  }
  void resolve() {
    for (const PendingLap& lap : pending) this->*lap.field += lap.kernels->elapsed_ms(*lap.from, *lap.to);
    pending.clear();
  }

  PhaseTimes& operator+=(const PhaseTimes& o) {
    forward_ms += o.forward_ms, backward_ms += o.backward_ms, comm_ms += o.comm_ms;
    exposed_comm_ms += o.exposed_comm_ms, optimizer_ms += o.optimizer_ms;
    pending.insert(pending.end(), o.pending.begin(), o.pending.end());
    return *this;
  }
  PhaseTimes divided_by(double n) const {
    PhaseTimes out;
    out.forward_ms = forward_ms / n, out.backward_ms = backward_ms / n, out.comm_ms = comm_ms / n;
    out.exposed_comm_ms = exposed_comm_ms / n, out.optimizer_ms = optimizer_ms / n;
    return out;
  }
};

}  // namespace tandem
