// tandem-trace merge (merge.h). Times are summed in long double: a wall-clock microsecond
// count (~2^51) plus a fractional trace offset keeps sub-nanosecond precision there, so the
// shift to the common origin changes no relative time within a rank.
#include "tools/trace/merge.h"

#include <tandem/version.h>

#include <algorithm>
#include <limits>
#include <set>

namespace tandem::trace_tool {
namespace {

using json = nlohmann::json;
using Micros = long double;  // wall-clock microseconds since the Unix epoch

const RankTrace* find_trace(const Inputs& in, int rank) {
  for (const RankTrace& t : in.traces)
    if (t.rank == rank) return &t;
  return nullptr;
}

const FlightDump* find_dump(const Inputs& in, int rank) {
  for (const FlightDump& d : in.dumps)
    if (d.rank == rank) return &d;
  return nullptr;
}

// Where an op's span starts: ops that started at their start (their queueing is an arg);
// ops that never did at their enqueue, on the queued track.
int64_t drawn_begin(const FlightEntry& e) { return e.started_unix_us.value_or(e.enqueued_unix_us); }

Micros earliest(const Inputs& in) {
  Micros t0 = std::numeric_limits<Micros>::infinity();
  for (const RankTrace& t : in.traces)
    for (const json& e : t.events) t0 = std::min(t0, Micros(t.origin_unix_us) + e["ts"].get<double>());
  for (const FlightDump& d : in.dumps) {
    t0 = std::min(t0, Micros(d.dumped_at_unix_us));
    for (const FlightEntry& e : d.entries) t0 = std::min(t0, Micros(drawn_begin(e)));
  }
  if (t0 == std::numeric_limits<Micros>::infinity())  // traces without a span: their origins
    for (const RankTrace& t : in.traces) t0 = std::min(t0, Micros(t.origin_unix_us));
  return t0;
}

json meta(const char* name, int pid, int tid, json args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

json op_span(const FlightDump& d, const FlightEntry& e, int tid, Micros t0) {
  const int64_t begin = drawn_begin(e);
  const int64_t end = e.ended_unix_us.value_or(d.dumped_at_unix_us);
  json args = {{"seq", e.seq},
               {"op", e.op},
               {"state", op_state_name(e.state)},
               {"enqueued_unix_us", e.enqueued_unix_us},
               {"started_unix_us", e.started_unix_us ? json(*e.started_unix_us) : json(nullptr)},
               {"ended_unix_us", e.ended_unix_us ? json(*e.ended_unix_us) : json(nullptr)}};
  if (e.dtype) args["dtype"] = *e.dtype;
  if (e.bytes) args["bytes"] = *e.bytes;
  args["queued_us"] = e.started_unix_us.value_or(d.dumped_at_unix_us) - e.enqueued_unix_us;
  json span = {{"ph", "X"}, {"name", e.op + " #" + std::to_string(e.seq)}, {"cat", "flight-recorder"},
               {"pid", d.rank}, {"tid", tid}, {"ts", static_cast<double>(Micros(begin) - t0)},
               {"dur", static_cast<double>(std::max<int64_t>(end - begin, 0))}};
  if (!e.ended_unix_us) {
    args["at_dump"] = std::string(e.started_unix_us ? "still running" : "never started") + " when the rank dumped" +
                      (d.reason.empty() ? "" : " (" + d.reason + ")") + "; drawn up to the dump";
    span["cname"] = "terrible";
  } else if (e.state == OpState::failed) {
    span["cname"] = "bad";
  }
  span["args"] = std::move(args);
  return span;
}

// The dump's own moment, an instant on the flight-recorder track.
json dump_instant(const FlightDump& d, int tid, Micros t0) {
  json args = {{"file", d.path}, {"reason", d.reason}, {"backend", d.backend}, {"entries", d.entries.size()},
               {"dumped_at_unix_us", d.dumped_at_unix_us}};
  if (d.world_size) args["world_size"] = *d.world_size;
  if (d.capacity) args["capacity"] = *d.capacity;
  if (d.recorded) args["recorded"] = *d.recorded;
  return {{"ph", "i"}, {"s", "p"}, {"name", "flight-recorder dump" + (d.reason.empty() ? "" : ": " + d.reason)},
          {"cat", "flight-recorder"}, {"pid", d.rank}, {"tid", tid},
          {"ts", static_cast<double>(Micros(d.dumped_at_unix_us) - t0)}, {"args", std::move(args)}};
}

void add_rank(const Inputs& in, int rank, Micros t0, json& events) {
  const RankTrace* trace = find_trace(in, rank);
  const FlightDump* dump = find_dump(in, rank);
  // The dump's node and host win: the recorder knows them; a trace under mpirun lacks node.
  Origin origin = trace ? trace->origin : Origin{};
  if (dump) {
    if (dump->origin.node) origin.node = dump->origin.node;
    if (dump->origin.host) origin.host = dump->origin.host;
  }
  events.push_back(meta("process_name", rank, 0, {{"name", rank_label(rank, origin)}}));
  events.push_back(meta("process_sort_index", rank, 0, {{"sort_index", rank}}));
  int next_tid = 2;  // after Tandem's compute (0) and comm (1), or after any tid the trace uses
  if (trace) {
    for (const auto& [tid, name] : trace->threads) {
      events.push_back(meta("thread_name", rank, tid, {{"name", name.empty() ? "track " + std::to_string(tid) : name}}));
      events.push_back(meta("thread_sort_index", rank, tid, {{"sort_index", tid}}));
      next_tid = std::max(next_tid, tid + 1);
    }
    for (json e : trace->events) {
      e["pid"] = rank;
      e["ts"] = static_cast<double>(Micros(trace->origin_unix_us) + e["ts"].get<double>() - t0);
      events.push_back(std::move(e));
    }
  }
  if (!dump) return;
  const int ops_tid = next_tid, queued_tid = next_tid + 1;
  events.push_back(meta("thread_name", rank, ops_tid, {{"name", "collectives (flight recorder)"}}));
  events.push_back(meta("thread_sort_index", rank, ops_tid, {{"sort_index", ops_tid}}));
  bool any_queued = false;
  for (const FlightEntry& e : dump->entries) {
    // Ops that never started would overlap the running ones; they get a track of their own,
    // where they all end at the dump and so nest.
    const bool started = e.started_unix_us.has_value();
    any_queued |= !started;
    events.push_back(op_span(*dump, e, started ? ops_tid : queued_tid, t0));
  }
  if (any_queued) {
    events.push_back(meta("thread_name", rank, queued_tid, {{"name", "collectives queued (flight recorder)"}}));
    events.push_back(meta("thread_sort_index", rank, queued_tid, {{"sort_index", queued_tid}}));
  }
  events.push_back(dump_instant(*dump, ops_tid, t0));
}

}  // namespace

std::string rank_label(int rank, const Origin& origin) {
  std::string where;
  if (origin.node) where = "node " + std::to_string(*origin.node);
  if (origin.host) where += (where.empty() ? "host " : ", host ") + *origin.host;
  return "rank " + std::to_string(rank) + (where.empty() ? "" : " (" + where + ")");
}

json merge(const Inputs& in) {
  std::set<int> ranks;
  for (const RankTrace& t : in.traces) ranks.insert(t.rank);
  for (const FlightDump& d : in.dumps) ranks.insert(d.rank);
  const Micros t0 = earliest(in);
  json events = json::array();
  for (int rank : ranks) add_rank(in, rank, t0, events);
  json inputs = json::array();
  for (const RankTrace& t : in.traces) inputs.push_back({{"file", t.path}, {"kind", "trace"}, {"rank", t.rank}});
  for (const FlightDump& d : in.dumps)
    inputs.push_back({{"file", d.path}, {"kind", "flight-recorder"}, {"rank", d.rank}});
  json other = {{"merged_by", std::string("tandem-trace ") + TANDEM_VERSION_STRING},
                {"origin_unix_us", static_cast<double>(t0)},
                {"ranks", std::vector<int>(ranks.begin(), ranks.end())},
                {"inputs", std::move(inputs)}};
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
}

}  // namespace tandem::trace_tool
