// What went wrong in an attempt, in a form every node can print: the failing worker
// (node, host, rank, pid, exit code or signal, last stderr lines) or a launcher-level
// reason (an interrupt, a lost store). The first node to publish one in the store
// wins, so every node reports the same first failure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::launcher {

struct Failure {
  int attempt = 0;
  int node = -1;
  std::string host;
  int rank = -1;  // -1: the failure is not one worker's (see reason)
  int local_rank = -1;
  long pid = 0;
  int exit_code = -1;  // >= 0: the worker exited with this code
  int signal = 0;      // > 0: the worker was killed by this signal
  std::string reason;  // set when rank == -1, e.g. "node 1's tandemrun received SIGTERM"
  std::vector<std::string> stderr_tail;
};

std::string to_json(const Failure& f);
// Throws std::runtime_error on a malformed record.
Failure failure_from_json(std::string_view text);

// One line: "rank 1 (node 0, host h, local rank 1, pid 42) was killed by signal 11 (SIGSEGV: ...)".
std::string summarize(const Failure& f);
// The full report: the summary, an out-of-memory hint for SIGKILL, and the stderr tail.
std::string report(const Failure& f);

std::string this_host();

}  // namespace tandem::launcher
