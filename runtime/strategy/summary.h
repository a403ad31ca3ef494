// The run summary of docs/reference.md (--summary-json): the same keys in every mode, so
// single, DP and DDP runs compare one to one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tandem/runtime/strategy/strategy.h"

namespace tandem {

struct StepTimingStats {
  double mean = 0, p50 = 0, p90 = 0;
};
// Mean and nearest-rank percentiles of step times (ms).
StepTimingStats step_timing_stats(std::vector<double> step_ms);

struct RunSummary {
  std::string mode, backend, device, model;
  std::string attention;  // gpt: --attention's kernel; empty (null in JSON) for other models
  int world_size = 1, replicas = 1, threads = 1;
  int64_t parameters = 0, steps = 0, global_batch = 0, epochs_completed = 0, timed_steps = 0;
  double samples_per_s = 0, train_time_s = 0;
  std::optional<double> tokens_per_s;  // language models: training tokens (positions) per second
  StepTimingStats step_ms;
  PhaseTimes phase_means;  // per timed step
  // CPU time per timed step on rank 0: all of its threads', and its process group's
  // communication thread(s)' (unset without one: single, DP, nccl).
  double process_cpu_ms = 0;
  std::optional<double> comm_cpu_ms;
  std::optional<double> final_train_loss;  // null when this run trained no step
  std::optional<double> test_loss, test_accuracy;
  std::string param_checksum;
  std::string buffer_checksum;  // every buffer (BatchNorm's statistics); of nothing when none
  bool sync_batchnorm = false, broadcast_buffers = true, activation_checkpointing = false;
  bool prefetch = false;  // a loader thread assembled the next step's batches (--prefetch)
  bool replicas_identical = true;
  std::vector<BucketInfo> buckets;
  std::vector<GradReadyInfo> grad_ready;
  std::optional<PowerSgdSummary> powersgd;  // DDP with --comm-hook powersgd
  std::optional<BucketCaps> bucket_caps;  // DDP  // DDP, rank 0: the cost model's profile (tandem-plan)
  double peak_rss_mb = 0;                  // this process (rank 0)
  std::vector<double> peak_rss_mb_per_rank;  // every process, by rank
  // Proportional set size at the end of training, by rank: a page shared by k processes
  // counts 1/k in each (shm's shared buffers, which a peer's RSS counts whole once it
  // read them), so the ranks' sum is the node's memory. Unset where /proc lacks it.
  std::vector<std::optional<double>> pss_mb_per_rank;
  std::optional<double> peak_device_memory_mb;  // CUDA runs: the caching allocator's peak
  // The process group's peak_temporary_bytes (collectives/process_group.h), by rank; 0
  // without a group. peak_temporary_bytes: the largest.
  std::vector<int64_t> peak_temporary_bytes_per_rank;
  int zero = 0;                                     // ZeRO stage (docs/zero.md)
  std::vector<double> optimizer_state_mb_per_rank;  // optimizer state each process holds, by rank
  uint64_t seed = 0;
  std::string precision = "fp32";          // matrix products: fp32 | bf16 (docs/precision.md)
  std::string grad_reduce_dtype = "fp32";  // gradient all-reduce: fp32 | bf16 | fp16
  std::optional<std::string> bf16_gemm;    // under bf16: native | fallback (CPU) | cublas
  std::string fp32_math = "fp32";          // fp32 matrix products: fp32 (strict) | tf32 (--tf32, CUDA)
  std::string cpu_kernels = "baseline";    // runtime/cpu/cpu_isa.h: baseline | avx2 | avx512 | avx512-bf16
  // Stopping to be resumed (train/requeue.h): the signal that stopped the run before its
  // last step ("SIGUSR1"), unset when it ran to the end; the restarts behind this run; the
  // checkpoint step it resumed from, unset when it started fresh.
  std::optional<std::string> stopped_by;
  int restart_count = 0, slurm_restart_count = 0;
  std::optional<int64_t> resumed_from_step;
  // "checkpoint" or "commit" (an elastic tandemrun's recovery in memory); null for a fresh start.
  std::optional<std::string> resumed_from;
  // In-memory commits this process made in its generation (--commit-every), and their mean
  // time; the elastic job's generations so far (TANDEM_ELASTIC_HISTORY, JSON), when under one.
  int64_t commits = 0;
  std::optional<double> commit_ms;
  std::optional<std::string> elastic_history_json;
  // --elastic-batch in force (train/elastic_batch.h; "off" outside DDP), the world size the
  // job first ran at, and the per-rank batch, --grad-accum and rates trained with: the
  // flags', or what the policy made of them on a resume at another world size.
  std::string elastic_batch = "off";
  int64_t base_world_size = 1, batch_size = 0, grad_accum = 1;
  float lr = 0, min_lr = 0;  // written as their shortest decimals (0.01, not 0.009999999776482582)
};

// Writes atomically (temporary file then rename). Throws naming the path on failure.
void write_summary_json(const RunSummary& summary, const std::string& path);
// Peak resident set size of this process in MiB (getrusage).
double peak_rss_mb();
// This process's proportional set size now, in MiB (/proc/self/smaps_rollup, Linux 4.14
// and later); nullopt where it cannot be read.
std::optional<double> pss_mb();

}  // namespace tandem
