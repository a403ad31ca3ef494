// tandem-train's trainer, built on the public API as a program of your own would be
// (docs/api.md), in the shape of torchtitan's train.py: each of these is a screenful.
//   Trainer(config)          data, the strategy (parallelize), loaders, schedule, resume
//   train()                  epochs of train_step until the run's last step; evaluation
//                            at the end of each epoch, every --eval-every steps and at the
//                            end; checkpoints; the summary at exit; SIGUSR1 stops it at a
//                            step boundary, checkpointed, to be resumed (train/requeue.h)
//   train_step(micro)        forward_backward_step, the optimizer step, the step's log line
//   forward_backward_step    the strategy's forward, loss and backward over the micro-batches
// Timing: a step's wall time runs from fetching its batch to the end of the optimizer
// update; the first steps (warm-up: allocator, caches, BLAS buffers) are excluded from
// samples_per_s and the phase means.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/fault_injection.h"
#include "train/elastic_worker.h"
#include "train/progress.h"
#include "train/requeue.h"
#include "runtime/strategy/summary.h"
#include "train/train_config.h"
#include "train/train_setup.h"
#include "runtime/checkpoint/checkpoint_meta.h"
#include "runtime/optim/optimizer.h"
#include "runtime/strategy/strategy.h"
#include "runtime/trace.h"

namespace tandem {

// How a training run ended: at its last step, or stopped by SIGUSR1 with a checkpoint
// written, to be resumed (main exits kExitStoppedToResume).
// paused: stopped at a commit step, as every rank agreed, for an elastic tandemrun to admit
// joining nodes (train/elastic_worker.h); the process waits for its next generation.
enum class TrainOutcome { finished, stopped_to_resume, paused };

class Trainer {
 public:
  // `elastic`: tandemrun's in-memory recovery (train/elastic_worker.h), or null. With it the
  // run commits every --commit-every steps and pauses at a commit when tandemrun asks.
  explicit Trainer(const TrainConfig& config, ElasticControl* elastic = nullptr);
  // Trains to the run's last step (or resumes there, or stops early on SIGUSR1), then
  // writes the summary.
  TrainOutcome train();

 private:
  StepOutput forward_backward_step(std::span<const Batch> micro, PhaseTimes& phases);
  void train_step(std::span<const Batch> micro, std::chrono::steady_clock::time_point t0);
  void evaluate(const char* when);
  void resume();
  void save();
  CheckpointMeta checkpoint_meta() const;  // what a checkpoint (or a commit) of this step records
  void commit();
  bool pause_agreed();
  bool stop_agreed();
  void stop_to_resume();
  void log_start() const;
  RunSummary summary() const;

  const TrainConfig& c_;
  ElasticControl* const elastic_;
  StopSignal stop_signal_;  // first: SIGUSR1 during set-up is seen at the first step
  const RestartCounts restarts_;
  const int threads_;
  const Device device_;
  TrainData data_;
  ModelConfig model_config_;
  ParallelOptions options_;
  std::string bf16_gemm_;              // "" under fp32
  std::string fp32_math_;              // "fp32" (strict) | "tf32" (--tf32 on CUDA)
  std::optional<FaultPlan> hang_;      // TANDEM_FAULT=hang-at-step:S (collectives/fault_injection.h)
  int rank_ = 0;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<DumpOnFatalError> dump_on_error_;  // a fatal error dumps the flight recorder
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<BatchSource> train_batches_, test_batches_;
  int64_t optimizer_state_bytes_ = 0;

  // The schedule, from the loader and the flags.
  int64_t accum_ = 1, steps_per_epoch_ = 0, total_steps_ = 0, warmup_ = 0, global_batch_ = 0, untimed_ = 0;
  std::unique_ptr<LrSchedule> schedule_;

  // Where the run stands.
  int64_t step_ = 0;
  LoaderPosition start_;
  int64_t last_saved_step_ = -1;
  std::optional<int64_t> resumed_from_step_;
  std::string last_saved_path_;            // rank 0's (the writer's) last checkpoint
  std::optional<std::string> stopped_by_;  // "SIGUSR1" once the ranks agreed to stop
  bool paused_ = false;                    // stopped at a commit for an elastic tandemrun
  int64_t commits_ = 0;
  bool resumed_from_commit_ = false;
  double commit_ms_ = 0;  // all commits together
  int64_t epochs_completed_ = 0;
  int64_t steps_this_run_ = 0;
  double last_loss_ = 0;
  bool trained_any_ = false;  // false when resumed at or past --max-steps
  std::optional<EvalResult> last_eval_;
  int64_t last_eval_step_ = -1;

  // What the summary reports.
  std::vector<double> step_ms_;
  PhaseTimes timed_phases_;
  // CPU time of the timed steps: the whole process's, and the process group's comm
  // thread(s)' (comm_cpu_known_ false when the group has none).
  double timed_process_cpu_ms_ = 0, timed_comm_cpu_ms_ = 0;
  bool comm_cpu_known_ = false;
  std::chrono::steady_clock::time_point run_t0_;
  // The epoch's running figures, for its log line and progress bar.
  double epoch_loss_sum_ = 0, epoch_ms_ = 0;
  int64_t epoch_steps_ = 0;
  ProgressBar* bar_ = nullptr;  // the epoch's, while it runs
  bool tty_ = false;            // a progress bar instead of log lines
};

// Runs the whole job described by `config`: sampling (--sample) or training. Throws on
// failure (main maps UsageError to exit 2, anything else to 1).
TrainOutcome run_training(const TrainConfig& config);

}  // namespace tandem
