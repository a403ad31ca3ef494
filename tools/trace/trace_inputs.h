// The inputs of tandem-trace: per-rank Chrome traces (tandem-train --trace, runtime/trace.h)
// and flight-recorder dumps ("format": "tandem-flight-recorder"), told apart by content,
// never by file name. Loading checks everything the merge relies on, so the merge itself
// cannot fail on a well-formed Inputs; every problem is an InputError naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::trace_tool {

// Bad input: the message starts with the file it is about. tandem-trace exits 2 on it.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Who wrote a file: from a trace's "otherData" or a dump's top level; empty when absent.
struct Origin {
  std::optional<int> node;
  std::optional<std::string> host;
  std::optional<int64_t> pid;
};

struct RankTrace {
  std::string path;
  int rank = 0;
  int64_t origin_unix_us = 0;           // wall clock at ts 0 of this file
  Origin origin;
  std::map<int, std::string> threads;   // tid -> thread_name, from the "M" events
  std::vector<nlohmann::json> events;   // every non-metadata event, as written (ts relative)
};

enum class OpState { queued, running, completed, failed };
const char* op_state_name(OpState s);

struct FlightEntry {
  int64_t seq = 0;
  std::string op;
  std::optional<std::string> dtype;
  std::optional<int64_t> bytes;
  int64_t enqueued_unix_us = 0;
  std::optional<int64_t> started_unix_us, ended_unix_us;
  OpState state = OpState::queued;
};

struct FlightDump {
  std::string path;
  int rank = 0;
  std::optional<int> world_size;
  Origin origin;
  std::string backend, reason;
  int64_t dumped_at_unix_us = 0;
  std::optional<int64_t> capacity, recorded;
  std::vector<FlightEntry> entries;  // in the file's order
};

struct Inputs {
  std::vector<RankTrace> traces;
  std::vector<FlightDump> dumps;
  std::vector<std::string> notes;  // files a directory scan skipped, and why
};

// Reads files and directories (each directory's *.json, sorted, not recursive; a file reached
// twice is read once). A file named on the command line must be a trace or a dump; a
// directory's JSON object of another kind (a --summary-json file, an earlier merge's output)
// is skipped with a note. Throws InputError on: a missing path, a file that is not JSON or
// not of a known kind, a trace without otherData.origin_unix_us (written by an older
// tandem-train: it cannot be aligned), a malformed dump, two traces or two dumps of one
// rank, and no input at all.
Inputs load_inputs(const std::vector<std::string>& paths);

}  // namespace tandem::trace_tool
