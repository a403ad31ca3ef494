// The launcher's own signals, read from a signalfd in the main loop.
// Invariant: SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1 and SIGUSR2 are blocked in every launcher thread
// (the mask is set before any thread starts and threads inherit it), so they are
// only ever seen through fd(); no handler runs at an arbitrary point. Workers get an
// empty mask back before exec (worker_process.cpp).
#pragma once

#include <vector>

namespace tandem::launcher {

class LauncherSignals {
 public:
  // Blocks the signals in the calling thread. Call first thing in main.
  LauncherSignals();
  ~LauncherSignals();
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;

  int fd() const { return fd_; }

  struct Pending {
    int termination = 0;  // the last SIGINT/SIGTERM/SIGHUP received, 0 if none
    bool child = false;   // a SIGCHLD arrived
    // SIGUSR1/SIGUSR2 received, in order: passed on to the workers, which go on running
    // (tandem-train stops at its next step boundary to be resumed; docs/reference.md)
    std::vector<int> forward;
  };
  // Reads every queued signal without blocking.
  Pending drain();

  // Remembers the first termination signal across drains (0 if none yet).
  int first_termination() const { return first_termination_; }

 private:
  int fd_ = -1;
  int first_termination_ = 0;
};

}  // namespace tandem::launcher
