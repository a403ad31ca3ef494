// Tracer: spans for a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev), one
// file per rank. Spans come from several threads (the training thread, and bucket
// all-reduces observed on the communication track), so adding is thread-safe; a
// disabled tracer costs one branch per span.
//
// Tracks (tid): 0 "compute" (batch loading, forward/backward per layer, wait, optimizer),
//               1 "comm" (each bucket's all-reduce, from launch to completion).
// Timestamps count from the tracer's steady-clock origin; the file's "otherData" records
// the wall clock at that origin (origin_unix_us, within origin_uncertainty_us), so
// tandem-trace merge can align ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  enum Track : int { compute = 0, comm = 1 };

  // Milliseconds from a to b, as the reducer's and ZeRO's timings count them.
  static double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  Tracer() = default;
  explicit Tracer(int rank) : rank_(rank), enabled_(true) {}
  bool enabled() const { return enabled_; }

  void add(const std::string& name, Track track, Clock::time_point begin, Clock::time_point end);
  // Writes the Chrome trace-event JSON; throws naming the path on failure.
  void write(const std::string& path) const;
  size_t span_count() const;

  // RAII span on the compute track.
  class Scope {
   public:
    Scope(Tracer* tracer, std::string name)
        : tracer_(tracer && tracer->enabled() ? tracer : nullptr), name_(std::move(name)),
          begin_(tracer_ ? Clock::now() : Clock::time_point{}) {}
    ~Scope() {
      if (tracer_) tracer_->add(name_, compute, begin_, Clock::now());
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer* tracer_;
    std::string name_;
    Clock::time_point begin_;
  };

 private:
  struct Span {
    std::string name;
    int track;
    Clock::time_point begin, end;
  };
  int rank_ = 0;
  bool enabled_ = false;
  // The origin (ts 0) on the steady clock and the wall clock at it: the wall clock is read
  // just before and just after the steady one and the midpoint kept, so the anchor is off
  // by at most half the pair's gap (written as origin_uncertainty_us). A slow clock read
  // (under qemu a read took tens of microseconds) widens the bound, not the error's bias.
  struct Anchor {
    Clock::time_point steady;
    std::chrono::system_clock::time_point wall;
    int64_t uncertainty_us = 0;  // rounded up
  };
  static Anchor read_anchor();
  Anchor origin_ = read_anchor();
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
};

// "run.json" for rank 0 of 1; "run.rank3.json" for rank 3 of a larger world.
std::string trace_path_for_rank(const std::string& path, int rank, int world_size);

}  // namespace tandem
