// Fault injection, for testing how a job (and the tooling around it) behaves when a
// rank freezes or dies at a chosen point. Off unless TANDEM_FAULT is set:
//
//   TANDEM_FAULT=stop-before:N   the rank stops itself (SIGSTOP) before issuing op #N,
//                                once op #N-1 has completed on it
//   TANDEM_FAULT=stop-inside:N   ... inside op #N, once #N-1 has completed: it has
//                                entered #N (and published so through its heartbeat)
//                                but its data never moves
//   TANDEM_FAULT=kill-inside:N   ... dies (SIGKILL) inside op #N, likewise
//   TANDEM_FAULT=hang-at-step:S  the training loop stops stepping after step S without
//                                exiting (its heartbeat stays alive); see train/trainer
//   TANDEM_FAULT_RANK=R          the rank that misbehaves (default 0)
//   TANDEM_FAULT_ATTEMPT=K       only in attempt K of a restarted job (default 0)
//
// A malformed TANDEM_FAULT throws std::invalid_argument naming it (the program exits 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

struct FaultPlan {
  enum class Kind : uint8_t { stop_before, stop_inside, kill_inside, hang_at_step };
  Kind kind = Kind::stop_before;
  int64_t at = 0;  // op seq, or training step for hang_at_step
  int rank = 0;

  // The plan for process rank `rank`, from the environment (the attempt is
  // TANDEM_RESTART_COUNT); nullopt when none applies. Throws std::invalid_argument on a
  // malformed variable.
  static std::optional<FaultPlan> from_env(int rank);
  std::string describe() const;  // "stop-inside:40 on rank 1"
};

}  // namespace tandem
