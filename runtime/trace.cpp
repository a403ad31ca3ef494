// Chrome trace-event writer (nlohmann-json). Besides "traceEvents" the file carries
// "otherData": rank, origin_unix_us (the wall clock at ts 0) and origin_uncertainty_us
// (how far off that may be), host, pid and, under
// tandemrun, node (NODE_RANK): what tandem-trace merge needs to put ranks on one clock.
#include "runtime/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tandem {

Tracer::Anchor Tracer::read_anchor() {
  using Wall = std::chrono::system_clock;
  const Wall::time_point before = Wall::now();
  const Clock::time_point steady = Clock::now();
  const Wall::time_point after = Wall::now();
  const auto gap = std::chrono::duration_cast<std::chrono::nanoseconds>(after - before);
  const int64_t half_ns = (std::max<int64_t>(0, gap.count()) + 1) / 2;
  return {steady, before + std::chrono::duration_cast<Wall::duration>(gap / 2), (half_ns + 999) / 1000};
}

void Tracer::add(const std::string& name, Track track, Clock::time_point begin, Clock::time_point end) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back({name, track, begin, end});
}

size_t Tracer::span_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_.size();
}

void Tracer::write(const std::string& path) const {
  using nlohmann::json;
  json events = json::array();
  const char* track_names[] = {"compute", "comm"};
  for (int t = 0; t < 2; ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", t},
                      {"args", {{"name", track_names[t]}}}});
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Span& s : spans_) {
      auto us = [&](Clock::time_point t) {
        return std::chrono::duration<double, std::micro>(t - origin_.steady).count();
      };
      events.push_back({{"ph", "X"}, {"name", s.name}, {"pid", rank_}, {"tid", s.track},
                        {"ts", us(s.begin)}, {"dur", us(s.end) - us(s.begin)}});
    }
  }
  json other = {{"rank", rank_},
                {"origin_unix_us",
                 std::chrono::duration_cast<std::chrono::microseconds>(origin_.wall.time_since_epoch()).count()},
                {"origin_uncertainty_us", origin_.uncertainty_us},
                {"pid", static_cast<long long>(::getpid())}};
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) other["host"] = host;
  if (const char* node = std::getenv("NODE_RANK"); node && *node) other["node"] = std::atoi(node);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << json{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}}.dump() << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write trace file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename trace file '" + tmp + "' to '" + path + "'");
}

std::string trace_path_for_rank(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  std::string suffix = ".rank" + std::to_string(rank);
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

}  // namespace tandem
