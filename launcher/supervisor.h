// One attempt of the job on this node: start the local workers, copy their output,
// and stop them all when anything fails, anywhere.
//
// The main loop is a single poll() over the signalfd, the outcome watcher's eventfd
// and every worker pipe:
//   worker exits non-zero / by a signal  -> publish the failure (first one wins) and
//                                           the outcome "failed", stop local workers
//   outcome appears in the store         -> another node failed (or was stopped):
//                                           stop local workers
//   SIGINT/SIGTERM/SIGHUP to tandemrun   -> publish "stopped", forward the signal
//                                           (a second one: SIGKILL at once)
//   SIGUSR1/SIGUSR2 to tandemrun         -> passed on to each worker, nothing stops
//   every local worker exits 75          -> publish "resume" (a node-level record with
//   (kExitStoppedToResume)                  exit code 75): the job stopped to be resumed,
//                                           with no restart; 75 mixed with other exits
//                                           is a failure
// "Stop" is the signal to each worker's process group, then SIGKILL to the groups
// still alive after --grace-s. Under elastic recovery in memory (--elastic-recovery
// memory), a stop after a failure signals only the workers that never said "hello" on
// their control socket: the others report "lost" when their group breaks, and are kept
// for the next generation (those that have not within --grace-s are killed). A joiner
// asks them to "pause" at their next commit instead of SIGUSR1. The attempt ends when every local worker is reaped and
// the attempt's outcome is known (a node whose workers all exited 0 waits for the
// other nodes). Invariant: each worker's group gets SIGKILL before run() returns, so
// nothing a worker started outlives the attempt.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "launcher/console.h"
#include "launcher/failure.h"
#include "launcher/options.h"
#include "launcher/rendezvous.h"
#include "launcher/signals.h"

namespace tandem::launcher {

struct AttemptEnd {
  enum class Kind { ok, failed, stopped, resume };  // resume: every worker exited kExitStoppedToResume
  Kind kind = Kind::ok;
  std::optional<Failure> first_failure;  // the job's first failure (from the store when reachable)
  int interrupted_by = 0;                // a termination signal this tandemrun received
  bool store_lost = false;               // the nodes can no longer coordinate
};

// A worker process kept from one generation to the next (elastic recovery in memory,
// train/elastic_worker.h): it said "lost" or "paused" on its control socket and waits
// there for its next assignment.
struct KeptWorker {
  int local_rank = 0;
  pid_t pid = -1;  // also its process group
  int control_fd = -1, stdout_fd = -1, stderr_fd = -1;
};
// SIGKILL to each kept worker's group, then reaps it and closes its fds; empties `kept`.
void release_kept(std::vector<KeptWorker>& kept);

// `kept` (elastic jobs; null otherwise): on entry the workers the previous generation kept,
// which this attempt adopts (sending each its new place) instead of starting new ones; on
// return the workers this attempt keeps, whatever its end (the caller releases them when
// the job does not go on).
AttemptEnd run_attempt(const LaunchOptions& options, JobStore& store, LauncherSignals& signals, Console& console,
                       const std::string& program_path, int attempt, std::vector<KeptWorker>* kept = nullptr);

}  // namespace tandem::launcher
