// Starting worker processes and signalling them.
// Invariants: every worker leads its own process group (so one kill reaches anything
// it started), gets SIGKILL when the launcher thread that forked it dies
// (PR_SET_PDEATHSIG, checked against the race where the launcher died first), reads
// stdin from /dev/null, and starts with default signal dispositions and an empty mask.
// Between fork and exec the child only makes async-signal-safe calls: the launcher
// has threads (store server, watcher), so everything is prepared before fork.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace tandem::launcher {

struct SpawnedWorker {
  pid_t pid = -1;  // also the worker's process group id
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

// Finds PROGRAM as execvp would (a name containing '/' is used as given). Throws
// std::runtime_error saying where it looked.
std::string resolve_program(const std::string& name);

// The launcher's environment with `overrides` replacing (or adding) variables.
std::vector<std::string> merged_environment(const std::vector<std::pair<std::string, std::string>>& overrides);

// Forks and execs `path` with `argv` and `env`; the worker inherits each of `inherit_fds`
// (those >= 0) though they are close-on-exec in the launcher. Must be called from the thread that
// outlives the worker (PDEATHSIG follows the forking thread). An exec failure shows up
// as exit code 127 with the reason on the worker's stderr. Throws std::runtime_error
// when the pipes or the fork cannot be made.
SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& inherit_fds = {});

// kill(-pgid, sig); a group that is already gone is not an error.
void signal_group(pid_t pgid, int sig);

// "SIGSEGV" (or "signal 42" for one without a name).
std::string signal_name(int sig);

}  // namespace tandem::launcher
