// tandem-trace: one view of a distributed job's timeline, for diagnosing failures and hangs.
//   tandem-trace merge -o OUT.json INPUT...   the ranks' traces (tandem-train --trace) and
//                                             flight-recorder dumps as one Perfetto trace
//   tandem-trace summary INPUT...             per rank: the last completed collective and
//                                             what was running or queued at the dump
// INPUT: files or directories (their *.json); kinds are told by content (trace_inputs.h).
// Exit codes: 0 done, 2 usage error or bad input (the message names the file), 1 other.
#include <CLI/CLI.hpp>
#include <tandem/version.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include "tools/cli_commands.h"
#include "tools/trace/merge.h"
#include "tools/trace/trace_inputs.h"

namespace {

using namespace tandem::trace_tool;

// Written beside OUT and renamed, so that OUT is never half a trace.
void write_output(const std::string& out_path, const nlohmann::json& merged) {
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw InputError(out_path + ": cannot write the output (cannot create " + tmp + ")");
    out << merged.dump() << '\n';
    if (!out.flush()) throw InputError(out_path + ": cannot write the output (writing " + tmp + " failed)");
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(out_path + ": cannot write the output (cannot rename " + tmp + " to it)");
  }
}

int merge_command(const std::vector<std::string>& paths, const std::string& out_path) {
  Inputs in = load_inputs(paths);
  for (const std::string& note : in.notes) std::fprintf(stderr, "tandem-trace: %s\n", note.c_str());
  nlohmann::json merged = merge(in);
  write_output(out_path, merged);
  std::printf("merged %zu trace(s) and %zu flight-recorder dump(s) of %zu rank(s) into %s\n", in.traces.size(),
              in.dumps.size(), merged["otherData"]["ranks"].size(), out_path.c_str());
  return 0;
}

std::string op_label(const FlightEntry& e) {
  std::string s = e.op + " #" + std::to_string(e.seq);
  if (e.dtype || e.bytes) {
    s += " (";
    if (e.dtype) s += *e.dtype;
    if (e.bytes) s += (e.dtype ? ", " : "") + std::to_string(*e.bytes) + " bytes";
    s += ")";
  }
  return s;
}

// What each rank's recorder says: enough to see which rank is behind which.
int summary_command(const std::vector<std::string>& paths) {
  Inputs in = load_inputs(paths);
  for (const std::string& note : in.notes) std::fprintf(stderr, "tandem-trace: %s\n", note.c_str());
  std::map<int, int64_t> last_seq;  // rank -> its last completed seq (-1: none)
  for (const FlightDump& d : in.dumps) {
    std::printf("%s: dumped (%s), %zu entries", rank_label(d.rank, d.origin).c_str(),
                d.reason.empty() ? "no reason given" : d.reason.c_str(), d.entries.size());
    if (d.recorded) std::printf(" of %lld recorded", static_cast<long long>(*d.recorded));
    std::printf("\n");
    const FlightEntry* last_done = nullptr;
    for (const FlightEntry& e : d.entries)
      if (e.state == OpState::completed && (!last_done || e.seq > last_done->seq)) last_done = &e;
    std::printf("  last completed: %s\n", last_done ? op_label(*last_done).c_str() : "none in the ring");
    last_seq[d.rank] = last_done ? last_done->seq : -1;
    for (const FlightEntry& e : d.entries) {
      if (e.state == OpState::completed) continue;
      const int64_t since = e.started_unix_us.value_or(e.enqueued_unix_us);
      std::printf("  %-9s %s for %.3f s at the dump\n", op_state_name(e.state), op_label(e).c_str(),
                  static_cast<double>(d.dumped_at_unix_us - since) / 1e6);
    }
  }
  if (last_seq.size() > 1) {
    auto [lo, hi] = std::minmax_element(last_seq.begin(), last_seq.end(),
                                        [](auto& a, auto& b) { return a.second < b.second; });
    auto seq = [](int64_t s) { return s < 0 ? std::string("none") : "#" + std::to_string(s); };
    if (lo->second != hi->second)
      std::printf("behind: rank %d (last completed %s; rank %d reached %s)\n", lo->first, seq(lo->second).c_str(),
                  hi->first, seq(hi->second).c_str());
    else
      std::printf("every rank's last completed op is %s\n", seq(lo->second).c_str());
  }
  for (const RankTrace& t : in.traces)
    if (!last_seq.count(t.rank))
      std::printf("rank %d: trace %s only, no flight-recorder dump\n", t.rank, t.path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-trace: merge per-rank traces and flight-recorder dumps into one Perfetto trace", "tandem-trace"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tandem-trace ") + TANDEM_VERSION_STRING, "Print the version and exit");
  std::vector<std::string> inputs;
  std::string out_path;
  CLI::App* merge_cmd = app.add_subcommand("merge", "Merge traces and flight-recorder dumps into one trace, a process per rank");
  merge_cmd->add_option("-o,--output", out_path, "The merged trace (Chrome JSON, for ui.perfetto.dev)")->required();
  merge_cmd->add_option("INPUT", inputs, "Trace files, flight-recorder dumps, or directories holding them (*.json)")
      ->required();
  CLI::App* summary_cmd = app.add_subcommand("summary", "Per rank: the last completed collective, and what was "
                                                        "running or queued at the dump");
  summary_cmd->add_option("INPUT", inputs, "Flight-recorder dumps (and traces), or directories holding them")
      ->required();
  if (const int rc = tandem::parse_commands(app, argc, argv, "tandem-trace", {"merge", "summary"}); rc >= 0) return rc;
  try {
    if (*merge_cmd) return merge_command(inputs, out_path);
    return summary_command(inputs);
  } catch (const InputError& e) {
    std::fprintf(stderr, "tandem-trace: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-trace: %s\n", e.what());
    return 1;
  }
}
