// Stopping to be resumed, and how often this run was restarted (docs/reference.md,
// "Stopping to be resumed"). Slurm's `--signal=USR1@T` (or `scancel --signal=USR1`)
// sends SIGUSR1 before the time limit; tandem-train then finishes its step, writes a
// checkpoint and exits kExitStoppedToResume (collectives/init.h).
// Invariant: the handler is async-signal-safe: it only sets a lock-free flag, which the
// training loop reads at a step boundary. It takes SIGUSR1 from the flight recorder
// (collectives/flight_recorder.h), which tandem-train's dumps then answer on SIGUSR2
// only, the signal tandemrun's --hang-timeout-s sends; so a requeue writes no dumps, and
// a hang analysis stops nothing.
#pragma once

namespace tandem {

class StopSignal {
 public:
  // Installs the SIGUSR1 handler. A signal reaches the process, not an object: the flag
  // behind it is process-wide, and every StopSignal reads the same one.
  StopSignal();
  // Whether SIGUSR1 arrived since the process started.
  bool requested() const;
};

struct RestartCounts {
  int restart_count = 0;        // TANDEM_RESTART_COUNT: tandemrun's attempt (0 outside tandemrun)
  int slurm_restart_count = 0;  // SLURM_RESTART_COUNT: Slurm requeues of the job (0 outside Slurm)
};
// Reads both variables (unset or empty: 0). Throws UsageError naming the variable when one
// is not an integer in [0, 2^30].
RestartCounts read_restart_counts();

}  // namespace tandem
