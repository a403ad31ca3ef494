// FlightRecorder: the last N collectives of one process group (op, dtype, bytes, seq,
// enqueue/start/end times, state) in a ring, dumped as JSON when something goes wrong:
// a collective timeout, a fatal error, SIGUSR2 (and SIGUSR1 where the program does not
// handle it: tandem-train does), or tandemrun --hang-timeout-s.
//
// Dump format (docs/failures.md; `tandem-trace merge` reads it):
//   {"format": "tandem-flight-recorder", "version": 1, "rank", "world_size", "node",
//    "host", "pid", "backend", "reason", "dumped_at_unix_us", "capacity", "recorded",
//    "entries": [{"seq", "op", "dtype", "bytes", "enqueued_unix_us", "started_unix_us",
//                 "ended_unix_us", "state": "queued|running|completed|failed"}]}
// Times are microseconds since the Unix epoch (null when not reached), so dumps of
// several ranks line up.
//
// Where: $TANDEM_LOG_DIR/flight-rank<R>.json when set (tandemrun --log-dir sets it),
// else one line on stderr. The signal only raises a flag (async-signal-safe); the group's
// heartbeat thread notices it within one heartbeat interval and writes the dump.
//
// Invariant: recording is a few stores under an uncontended mutex per op (ops are
// buckets, not elements), so it costs nothing measurable; the ring never allocates
// after construction.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/collectives/types.h"

namespace spdlog {
class logger;
}

namespace tandem {

struct FlightIdentity {
  std::string backend;
  int rank = 0;
  int world_size = 1;
  int node = -1;
};

class FlightRecorder {
 public:
  // Capacity: TANDEM_FLIGHT_RECORDER_SIZE (default 2048; 0 turns recording off).
  explicit FlightRecorder(FlightIdentity identity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  void enqueued(const Collective& c);
  void started(uint64_t seq);
  void ended(uint64_t seq, bool ok);

  // The dump as JSON text.
  std::string to_json(const std::string& reason) const;
  // Writes the dump where the header says; returns the path, or "stderr". Never throws.
  std::string dump(const std::string& reason) const;

  // Whether a dump signal arrived since this recorder last asked (installs the handler on
  // first use, unless the program has its own).
  bool dump_requested();

 private:
  enum class State : uint8_t { empty, queued, running, completed, failed };
  struct Entry {
    uint64_t seq = 0;
    OpType op = OpType::barrier;
    DType dtype = DType::f32;
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point enqueued{}, started{}, ended{};
    State state = State::empty;
  };
  Entry* find(uint64_t seq);

  FlightIdentity id_;
  std::shared_ptr<spdlog::logger> log_;  // dumps may run on a heartbeat thread at exit (health.h)
  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  uint64_t recorded_ = 0;
  uint64_t seen_requests_ = 0;
};

}  // namespace tandem
