// Loading and checking tandem-trace's inputs (trace_inputs.h). Every check names the file
// and, inside a dump, the entry, so a user can find the line that is wrong.
#include "tools/trace/trace_inputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tandem::trace_tool {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kFlightFormat = "tandem-flight-recorder";
constexpr int kFlightVersion = 1;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw InputError(path + ": " + problem);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, "cannot be read");
  return text.str();
}

json parse(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    size_t close = what.find("] ");
    fail(path, "not JSON (" + (close == std::string::npos ? what : what.substr(close + 2)) + ")");
  }
}

bool is_int(const json& v) { return v.is_number_integer(); }

// A required integer field of `obj`; `where` says which object, for the message.
int64_t get_int(const std::string& path, const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(path, where + "has no \"" + key + "\"");
  if (!is_int(*it)) fail(path, where + "\"" + key + "\" is not an integer: " + it->dump());
  return it->get<int64_t>();
}

// An integer field that may be absent or null.
std::optional<int64_t> get_opt_int(const std::string& path, const json& obj, const char* key,
                                   const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!is_int(*it)) fail(path, where + "\"" + key + "\" is neither an integer nor null: " + it->dump());
  return it->get<int64_t>();
}

std::optional<std::string> get_opt_string(const std::string& path, const json& obj, const char* key,
                                          const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(path, where + "\"" + key + "\" is not a string: " + it->dump());
  return it->get<std::string>();
}

int get_rank(const std::string& path, const json& obj, const std::string& where) {
  int64_t rank = get_int(path, obj, "rank", where);
  if (rank < 0 || rank > 1'000'000) fail(path, where + "\"rank\" " + std::to_string(rank) + " is out of range");
  return static_cast<int>(rank);
}

Origin get_origin(const std::string& path, const json& obj, const std::string& where) {
  Origin o;
  // A recorder that does not know its node writes -1.
  if (auto node = get_opt_int(path, obj, "node", where); node && *node >= 0) o.node = static_cast<int>(*node);
  o.host = get_opt_string(path, obj, "host", where);
  o.pid = get_opt_int(path, obj, "pid", where);
  return o;
}

RankTrace load_trace(const std::string& path, const json& doc) {
  if (!doc["traceEvents"].is_array()) fail(path, "\"traceEvents\" is not an array");
  auto other = doc.find("otherData");
  if (other == doc.end() || !other->is_object() || !other->contains("origin_unix_us"))
    fail(path, "a trace without otherData.origin_unix_us: it was written by an older tandem-train and "
               "cannot be aligned with other ranks (trace again with this version)");
  RankTrace t;
  t.path = path;
  t.rank = get_rank(path, *other, "otherData ");
  t.origin_unix_us = get_int(path, *other, "origin_unix_us", "otherData ");
  t.origin = get_origin(path, *other, "otherData ");
  size_t index = 0;
  for (const json& e : doc["traceEvents"]) {
    const std::string where = "traceEvents[" + std::to_string(index++) + "] ";
    if (!e.is_object()) fail(path, where + "is not an object");
    auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) fail(path, where + "has no \"ph\" string");
    const int64_t tid64 = e.contains("tid") ? get_int(path, e, "tid", where) : 0;
    if (tid64 < 0 || tid64 > 1'000'000) fail(path, where + "\"tid\" " + std::to_string(tid64) + " is out of range");
    const int tid = static_cast<int>(tid64);
    if (*ph == "M") {
      if (e.value("name", "") == "thread_name" && e.contains("args") && e["args"].is_object() &&
          e["args"].contains("name") && e["args"]["name"].is_string())
        t.threads[tid] = e["args"]["name"].get<std::string>();
      continue;  // process_name and sort indices are the merge's to write
    }
    if (!e.contains("ts") || !e["ts"].is_number()) fail(path, where + "has no numeric \"ts\"");
    if (*ph == "X" && (!e.contains("dur") || !e["dur"].is_number()))
      fail(path, where + "is a complete event (\"X\") without a numeric \"dur\"");
    if (!t.threads.count(tid)) t.threads[tid] = "";  // a track without a name still gets one
    t.events.push_back(e);
  }
  return t;
}

OpState parse_state(const std::string& path, const json& e, const std::string& where) {
  auto s = get_opt_string(path, e, "state", where);
  if (!s) fail(path, where + "has no \"state\"");
  if (*s == "queued") return OpState::queued;
  if (*s == "running") return OpState::running;
  if (*s == "completed") return OpState::completed;
  if (*s == "failed") return OpState::failed;
  fail(path, where + "\"state\" \"" + *s + "\" is not queued, running, completed or failed");
}

FlightDump load_dump(const std::string& path, const json& doc) {
  int64_t version = get_int(path, doc, "version", "the dump ");
  if (version != kFlightVersion)
    fail(path, "flight-recorder format version " + std::to_string(version) + " (this tandem-trace reads version " +
                   std::to_string(kFlightVersion) + ")");
  FlightDump d;
  d.path = path;
  d.rank = get_rank(path, doc, "the dump ");
  if (auto ws = get_opt_int(path, doc, "world_size", "the dump ")) d.world_size = static_cast<int>(*ws);
  d.origin = get_origin(path, doc, "the dump ");
  d.backend = get_opt_string(path, doc, "backend", "the dump ").value_or("");
  d.reason = get_opt_string(path, doc, "reason", "the dump ").value_or("");
  d.dumped_at_unix_us = get_int(path, doc, "dumped_at_unix_us", "the dump ");
  d.capacity = get_opt_int(path, doc, "capacity", "the dump ");
  d.recorded = get_opt_int(path, doc, "recorded", "the dump ");
  auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) fail(path, "the dump has no \"entries\" array");
  size_t index = 0;
  for (const json& e : *entries) {
    const std::string where = "entries[" + std::to_string(index++) + "] ";
    if (!e.is_object()) fail(path, where + "is not an object");
    FlightEntry f;
    f.seq = get_int(path, e, "seq", where);
    auto op = get_opt_string(path, e, "op", where);
    if (!op || op->empty()) fail(path, where + "has no \"op\"");
    f.op = *op;
    f.dtype = get_opt_string(path, e, "dtype", where);
    f.bytes = get_opt_int(path, e, "bytes", where);
    f.enqueued_unix_us = get_int(path, e, "enqueued_unix_us", where);
    f.started_unix_us = get_opt_int(path, e, "started_unix_us", where);
    f.ended_unix_us = get_opt_int(path, e, "ended_unix_us", where);
    f.state = parse_state(path, e, where);
    if (f.ended_unix_us && !f.started_unix_us) fail(path, where + "has an end but no start");
    d.entries.push_back(std::move(f));
  }
  return d;
}

enum class Kind { trace, dump, merged, other };

Kind kind_of(const json& doc) {
  if (!doc.is_object()) return Kind::other;
  if (doc.contains("format")) return Kind::dump;
  if (!doc.contains("traceEvents")) return Kind::other;
  auto other = doc.find("otherData");
  return other != doc.end() && other->is_object() && other->contains("merged_by") ? Kind::merged : Kind::trace;
}

void load_document(const std::string& path, const json& doc, bool from_scan, Inputs& in) {
  switch (kind_of(doc)) {
    case Kind::dump:
      if (!doc["format"].is_string() || doc["format"] != kFlightFormat)
        fail(path, "unknown format " + doc["format"].dump() + " (expected \"" + kFlightFormat + "\")");
      in.dumps.push_back(load_dump(path, doc));
      return;
    case Kind::trace:
      in.traces.push_back(load_trace(path, doc));
      return;
    case Kind::merged:  // e.g. an earlier merge's output written into the scanned directory
      if (from_scan) {
        in.notes.push_back("skipped " + path + ": already a merged trace");
        return;
      }
      fail(path, "already a merged trace (tandem-trace merge output): give the per-rank traces instead");
    case Kind::other:
      if (from_scan && doc.is_object()) {
        in.notes.push_back("skipped " + path + ": neither a Chrome trace nor a flight-recorder dump");
        return;
      }
      fail(path, "unknown format: neither a Chrome trace (\"traceEvents\") nor a flight-recorder dump "
                 "(\"format\": \"" + std::string(kFlightFormat) + "\")");
  }
}

void load_file(const std::string& path, bool from_scan, Inputs& in, std::set<fs::path>& loaded) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  if (!ec && !loaded.insert(canonical).second) return;  // named twice, or also found by a scan
  try {
    load_document(path, parse(path), from_scan, in);
  } catch (const json::exception& e) {  // a check above missed a type: still the file's fault
    fail(path, e.what());
  }
}

template <class T>
void check_one_per_rank(const std::vector<T>& items, const char* what) {
  std::map<int, const std::string*> seen;
  for (const T& item : items) {
    auto [it, fresh] = seen.emplace(item.rank, &item.path);
    if (!fresh)
      throw InputError(item.path + ": a second " + what + " of rank " + std::to_string(item.rank) + " (the first is " +
                       *it->second + ")");
  }
}

}  // namespace

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::queued: return "queued";
    case OpState::running: return "running";
    case OpState::completed: return "completed";
    case OpState::failed: return "failed";
  }
  return "?";
}

Inputs load_inputs(const std::vector<std::string>& paths) {
  Inputs in;
  std::set<fs::path> loaded;
  for (const std::string& path : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw InputError(path + ": no such file or directory");
    if (!fs::is_directory(st)) {
      load_file(path, false, in, loaded);
      continue;
    }
    std::vector<std::string> found;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json" && it->is_regular_file()) found.push_back(it->path().string());
    if (ec) throw InputError(path + ": cannot list the directory (" + ec.message() + ")");
    std::sort(found.begin(), found.end());
    for (const std::string& f : found) load_file(f, true, in, loaded);
  }
  if (in.traces.empty() && in.dumps.empty())
    throw InputError("no inputs: no trace or flight-recorder dump among " + std::to_string(paths.size()) + " path(s)");
  check_one_per_rank(in.traces, "trace");
  check_one_per_rank(in.dumps, "flight-recorder dump");
  std::sort(in.traces.begin(), in.traces.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  std::sort(in.dumps.begin(), in.dumps.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  return in;
}

}  // namespace tandem::trace_tool
