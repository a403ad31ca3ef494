// tandem-trace merge: the per-rank traces and flight-recorder dumps of one job as a single
// Chrome / Perfetto trace. Invariants of the result:
//   - one process per rank (pid = rank), named "rank R (node N, host H)";
//   - the rank's own tracks keep their tids and names; the flight recorder adds
//     "collectives (flight recorder)" (ops that started: start to end, or to the dump when
//     still running) and, when some op never started, "collectives queued (flight recorder)"
//     (enqueue to dump), on tids after the trace's;
//   - every time is on the common wall clock, shifted so that the earliest event is at 0;
//     within a rank only that shift applies, so order and durations are as recorded.
#pragma once

#include <nlohmann/json.hpp>

#include "tools/trace/trace_inputs.h"

namespace tandem::trace_tool {

nlohmann::json merge(const Inputs& inputs);

// The process name of a rank: "rank R (node N, host H)", leaving out what is unknown.
std::string rank_label(int rank, const Origin& origin);

}  // namespace tandem::trace_tool
