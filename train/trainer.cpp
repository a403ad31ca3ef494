// tandem-train's trainer (train/trainer.h): the loop on the public API's strategy.
#include "train/trainer.h"

#include <signal.h>
#include <time.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "collectives/init.h"
#include "train/elastic_batch.h"
#include "train/fine_tune.h"
#include "zoo/generate.h"
#include "train/progress.h"
#include "zoo/zoo.h"
#include "runtime/allocator.h"
#include "runtime/freeze.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cuda_device.h"
#include "runtime/data/prefetch.h"
#include "runtime/kernels.h"
#include "runtime/strategy/parallel.h"

namespace tandem {
namespace {

// DDP ranks agree on a stop request (SIGUSR1) every this many steps, so the all-gather
// that takes is at most a tenth of the per-step cost it would be (on a 2-vCPU machine the
// per-step check looked like several ms of a ~12 ms gloo step, within heavy noise).
constexpr int64_t kStopCheckEvery = 10;

// --prefetch auto: on for CUDA, where the GPU would otherwise idle while the host assembles
// a batch; off for the CPU, where the thread takes a core from the step (docs/reference.md).
bool prefetching(const TrainConfig& c, Device device) {
  switch (c.prefetch) {
    case Prefetch::on: return true;
    case Prefetch::off: return false;
    case Prefetch::automatic: return device.is_cuda();
  }
  return false;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Trainer::Trainer(const TrainConfig& c, ElasticControl* elastic)
    : c_(c),
      elastic_(elastic),
      restarts_(read_restart_counts()),
      threads_(c.mode == Mode::dp ? 1 : default_cpu_threads(c.threads)),
      device_((set_cpu_threads(threads_), resolve_device(c))),
      data_(load_train_data(c)),
      model_config_(model_config(c, data_)),
      options_(parallel_options(c, device_, threads_)),
      bf16_gemm_(bf16_gemm_name(c, device_)),
      fp32_math_(apply_fp32_math(c, device_)) {
  if (device_.is_cuda())
    spdlog::info("fp32 math: {}", fp32_math_ == "tf32"
                                       ? "tf32 (--tf32: cuBLAS TF32 tensor-op math, operands rounded to 10-bit mantissas)"
                                       : "strict fp32 (cuBLAS default math, no TF32)");
  if (!bf16_gemm_.empty())
    spdlog::info("precision bf16: matrix products in bf16 with f32 accumulation ({}), gradients reduced in {}",
                 device_.is_cuda() ? "cuBLAS" : cpu::bf16_gemm_path_str(cpu::bf16_gemm_path()),
                 c.comm_hook == CommHookKind::bf16 ? "bf16" : "fp32");
  if (c.mode == Mode::ddp) {
    options_.group = init_group(options_);  // first: the tracer and the log level depend on the rank
    rank_ = options_.group->rank();
    hang_ = FaultPlan::from_env(rank_);
    if (hang_ && hang_->kind != FaultPlan::Kind::hang_at_step) hang_.reset();  // the group's to inject
    if (rank_ != 0 && spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  }
  tracer_ = c.trace.empty() ? std::make_unique<Tracer>() : std::make_unique<Tracer>(rank_);
  dump_on_error_ = std::make_unique<DumpOnFatalError>(options_.group);
  strategy_ = parallelize(fine_tune_model_factory(model_config_, c), optimizer_config(c), options_,
                          tracer_.get());
  optimizer_state_bytes_ = strategy_->optimizer().state_bytes();

  // DDP ranks each load their shard; DataParallel loads the global batch and scatters it.
  if (data_.text) {
    train_batches_ = training_batches(data_.text, c.context, c.batch_size, *strategy_, c.seed);
    // Every rank evaluates the same fixed windows: test_loss is comparable across runs. Batches
    // of 12 windows: the activations of a training batch, not 4x them at the peak.
    test_batches_ = std::make_unique<TextEvalLoader>(data_.text, c.context, 12);
  } else {
    train_batches_ = training_batches(data_.train, c.batch_size, *strategy_, c.seed);
    test_batches_ = evaluation_batches(data_.test);
  }
  accum_ = c.grad_accum;
  if (prefetching(c, device_)) {
    // One step's micro-batches ahead. DataParallel scatters the host batch across its
    // devices itself, so only single and DDP runs upload in the thread.
    PrefetchOptions po{.depth = accum_, .upload = std::nullopt};
    if (device_.is_cuda() && c.mode != Mode::dp) po.upload = device_;
    train_batches_ = std::make_unique<PrefetchingSource>(std::move(train_batches_), po);
    spdlog::info("prefetch: a loader thread assembles{} the next {} batch(es) during each step",
                 po.upload ? " and uploads" : "", accum_);
  }
  steps_per_epoch_ = train_batches_->steps_per_epoch() / accum_;
  const int replicas = strategy_->replicas();
  global_batch_ = c.batch_size * replicas * accum_;
  if (steps_per_epoch_ == 0)
    throw std::runtime_error("the training set (" + std::to_string(data_.train_size()) +
                             " samples) is smaller than one global batch of " + std::to_string(global_batch_));
  total_steps_ = steps_per_epoch_ * c.epochs;
  if (c.max_steps > 0) total_steps_ = std::min(total_steps_, c.max_steps);
  warmup_ = c.warmup_steps >= 0 ? c.warmup_steps : total_steps_ / 50;
  schedule_ = std::make_unique<LrSchedule>(c.lr, warmup_, total_steps_, c.min_lr);
  untimed_ = total_steps_ > 1 ? std::min<int64_t>(5, std::max<int64_t>(1, total_steps_ / 10)) : 0;
  log_start();
  resume();
}

void Trainer::log_start() const {
  if (strategy_->zero_stage() > 0) {
    // What a plain run's optimizer would hold: every slot of every parameter element, f32.
    const double full = static_cast<double>(strategy_->optimizer().slot_names().size()) *
                        static_cast<double>(trainable_parameter_count(strategy_->model())) * 4.0 / (1024.0 * 1024.0);
    const double mine = static_cast<double>(optimizer_state_bytes_) / (1024.0 * 1024.0);
    spdlog::info("zero-1: optimizer state {:.1f} MiB per rank instead of {:.1f} MiB (saved {:.1f} MiB), "
                 "shards of {} buckets over {} ranks",
                 mine, full, full - mine, strategy_->buckets().size(), strategy_->replicas());
  }
  const int64_t test_size = data_.text ? kDefaultEvalWindows : data_.test->size;
  spdlog::info("{}: model {} ({} parameters), {} {} train / {} test, global batch {}, {} steps "
               "({} per epoch), {} threads, lr {} (warm-up {} steps, cosine), {}, CPU kernels {}",
               strategy_->mode(), c_.model, strategy_->model().num_parameters(), c_.data, data_.train_size(),
               test_size, global_batch_, total_steps_, steps_per_epoch_, threads_, c_.lr, warmup_,
               c_.optimizer == OptimizerKind::adamw ? "adamw" : "sgd", cpu::cpu_kernel_set());
  if (strategy_->rank() == 0)
    if (auto warning = cpu::blas_core_warning()) spdlog::warn("{}", *warning);
}

void Trainer::resume() {
  // Every rank and mode loads: DDP ranks need their optimizer state; DP loads into device 0's
  // replica, which the next step broadcasts; under ZeRO every rank loads the full state and
  // keeps its shard of it.
  const std::string from = resolve_resume(c_.resume, c_.checkpoint_dir);
  if (from.empty()) return;
  CheckpointMeta m;
  strategy_->with_full_optimizer(FullState::write,
                                 [&](Optimizer& full) { m = load_checkpoint(from, strategy_->model(), &full); });
  const auto hook_file = m.files.find(kCommHookFile);
  if (strategy_->comm_hook_stateful()) {
    if (hook_file != m.files.end())
      strategy_->load_comm_hook_state((std::filesystem::path(from) / kCommHookFile).string(), hook_file->second.crc32);
    else if (strategy_->rank() == 0)
      spdlog::warn("{} holds no comm hook state: PowerSGD starts afresh (uncompressed steps, then its gate)", from);
  } else if (hook_file != m.files.end() && strategy_->rank() == 0) {
    spdlog::warn("{} holds comm hook state (--comm-hook powersgd) that this run does not use: ignored", from);
  }
  if (m.seed != c_.seed || m.dataset != c_.data)
    spdlog::warn("resuming a run of --data {} --seed {} with --data {} --seed {}: the data order differs", m.dataset,
                 m.seed, c_.data, c_.seed);
  std::map<std::string, uint64_t> counters;
  for (const auto& [key, value] : m.extra)
    if (key.rfind("counter.", 0) == 0) counters[key.substr(8)] = std::stoull(value);
  strategy_->set_counters(counters);
  step_ = last_saved_step_ = m.step;
  resumed_from_step_ = m.step;
  resumed_from_commit_ = elastic_ && from.rfind(elastic_->commit_dir(), 0) == 0;
  start_ = m.position_for(train_batches_->batch_size(), train_batches_->replicas());
  // Saved right after an epoch's last step: the loop would have moved on to the next epoch.
  if (start_.step_in_epoch + accum_ > train_batches_->steps_per_epoch()) start_ = {start_.epoch + 1, 0};
  epochs_completed_ = start_.epoch;
}

CheckpointMeta Trainer::checkpoint_meta() const {
  CheckpointMeta m;
  m.step = step_;
  m.epoch = train_batches_->position().epoch;
  m.step_in_epoch = train_batches_->position().step_in_epoch;
  m.seed = c_.seed;
  m.dataset = c_.data;
  m.batch_size = train_batches_->batch_size();
  m.replicas = train_batches_->replicas();
  m.grad_accum = accum_;
  m.model_name = model_config_.name;
  m.hidden = model_config_.hidden;
  const ModelConfig& mc = model_config_;
  m.input_shape = data_.text ? Shape{c_.context} : Shape{mc.in_channels, mc.height, mc.width};
  m.classes = mc.classes;
  if (data_.text) save_gpt_meta(mc.gpt, *data_.text, m);
  m.lr_schedule = LrScheduleInfo{"warmup_cosine", c_.lr, c_.min_lr, warmup_, total_steps_};
  for (const auto& [name, value] : strategy_->model().counters()) m.extra["counter." + name] = std::to_string(value);
  m.mode = strategy_->mode();
  m.world_size = c_.mode == Mode::ddp ? strategy_->replicas() : 1;
  if (c_.mode == Mode::ddp)
    m.extra[kBaseWorldKey] = std::to_string(c_.elastic_base_world > 0 ? c_.elastic_base_world : strategy_->replicas());
  return m;
}

void Trainer::save() {
  last_saved_step_ = step_;
  // Replicas are identical; one writer. Under ZeRO every rank takes part in gathering the
  // optimizer state's shards (with_full_optimizer), and rank 0 writes it.
  // A stateful comm hook (PowerSGD) gathers every rank's error feedback for it.
  const bool hook_state = strategy_->comm_hook_stateful();
  if (strategy_->rank() != 0 && strategy_->zero_stage() == 0 && !hook_state) return;
  const CheckpointMeta m = checkpoint_meta();
  const TensorFile hook = hook_state ? strategy_->comm_hook_state() : TensorFile{};
  strategy_->with_full_optimizer(FullState::read, [&](Optimizer& full) {
    if (strategy_->rank() == 0)
      last_saved_path_ =
          save_checkpoint(c_.checkpoint_dir, strategy_->model(), full, m, c_.keep_last, hook_state ? &hook : nullptr);
  });
}

// Every rank keeps its own copy (ElasticControl::attach rules out ZeRO, whose state is
// sharded): in RAM, the newest only.
void Trainer::commit() {
  Tracer::Scope span(tracer_.get(), "commit");
  const auto t0 = std::chrono::steady_clock::now();
  save_checkpoint(elastic_->commit_dir(), strategy_->model(), strategy_->optimizer(), checkpoint_meta(), 1);
  commit_ms_ += ms_since(t0);
  ++commits_;
}

// Whether any rank's tandemrun asked to pause (a node asks to join): all ranks pause at
// the same commit.
bool Trainer::pause_agreed() {
  const std::vector<int64_t> asked = strategy_->per_rank(elastic_->pause_requested() ? 1 : 0);
  return std::any_of(asked.begin(), asked.end(), [](int64_t v) { return v != 0; });
}

bool Trainer::stop_agreed() {
  if (step_ >= total_steps_) return false;  // the last step: the run ends as usual, exit 0
  if (c_.checkpoint_dir.empty()) {
    // Unarmed: no collective per step, so each process decides alone. Nothing can be saved:
    // stopping 'to be resumed' would lose the run silently, going on would be cut off by
    // the time limit just the same.
    if (!stop_signal_.requested()) return false;
    throw std::runtime_error("SIGUSR1 (stop to be resumed) received after step " + std::to_string(step_) +
                             " of " + std::to_string(total_steps_) +
                             ", but there is no --checkpoint-dir: nothing was saved, the run cannot be resumed. "
                             "Pass --checkpoint-dir DIR (and --resume auto) to make it resumable");
  }
  // The signal reaches the ranks at slightly different times: every rank stops after the
  // first checked step at whose end any rank had seen it, so all stop at the same step.
  // Under DDP that takes a collective, so only every kStopCheckEvery steps; elsewhere it
  // is a load, every step.
  if (options_.group && step_ % kStopCheckEvery != 0) return false;
  const std::vector<int64_t> seen = strategy_->per_rank(stop_signal_.requested() ? 1 : 0);
  if (std::none_of(seen.begin(), seen.end(), [](int64_t v) { return v != 0; })) return false;
  std::string ranks;
  for (size_t r = 0; r < seen.size(); ++r)
    if (seen[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (seen.size() > 1)
    spdlog::info("SIGUSR1 seen by rank(s) {} of {} by the end of step {}: every rank stops there", ranks,
                 seen.size(), step_);
  return true;
}

void Trainer::stop_to_resume() {
  stopped_by_ = "SIGUSR1";
  if (last_saved_step_ != step_) save();
  // From here the run only writes its summary and exits 75. A launcher that ends the whole
  // step when the first rank exits non-zero (Slurm's KillOnBadExit) would otherwise turn
  // the later ranks' 75 into 143 with its SIGTERM; SIGKILL still ends a stuck exit.
  signal(SIGTERM, SIG_IGN);
  if (strategy_->rank() == 0)
    spdlog::warn("SIGUSR1 received: checkpoint at step {} written to {}; exiting {} to be requeued (resume with "
                 "--resume auto)",
                 step_, last_saved_path_, kExitStoppedToResume);
}

void Trainer::evaluate(const char* when) {
  last_eval_ = strategy_->evaluate(*test_batches_);
  last_eval_step_ = step_;
  spdlog::info("eval ({}) step {}: test_loss {:.4f} test_accuracy {:.4f}", when, step_, last_eval_->loss,
               last_eval_->metric("accuracy").value_or(0));
}

StepOutput Trainer::forward_backward_step(std::span<const Batch> micro, PhaseTimes& phases) {
  return strategy_->forward_backward(micro, phases);  // forward, loss, backward; gradients synchronised
}

namespace {

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

std::optional<double> comm_cpu_ms(const ProcessGroup* group) {
  const auto t = group ? group->comm_thread_cpu_time() : std::nullopt;
  if (!t) return std::nullopt;
  return std::chrono::duration<double, std::milli>(*t).count();
}

}  // namespace

void Trainer::train_step(std::span<const Batch> micro, std::chrono::steady_clock::time_point t0) {
  const double cpu0 = process_cpu_ms();
  const std::optional<double> comm0 = comm_cpu_ms(options_.group.get());
  PhaseTimes phases;
  StepOutput out = forward_backward_step(micro, phases);
  {
    Tracer::Scope span(tracer_.get(), "optimizer step");
    strategy_->step(schedule_->at(step_), phases);
  }
  phases.resolve();  // the step's one wait for the device: its phase times
  const double loss = out.loss(), ms = ms_since(t0);
  last_loss_ = loss;
  trained_any_ = true;
  if (steps_this_run_++ >= untimed_) {  // warm-up counted from this process's start
    step_ms_.push_back(ms);
    timed_phases_ += phases;
    timed_process_cpu_ms_ += process_cpu_ms() - cpu0;
    const std::optional<double> comm1 = comm_cpu_ms(options_.group.get());
    comm_cpu_known_ = comm0 && comm1;
    if (comm_cpu_known_) timed_comm_cpu_ms_ += *comm1 - *comm0;
  }
  ++step_;
  ++epoch_steps_;
  if (options_.group) options_.group->health().step_done(step_);  // tandemrun --hang-timeout-s watches it
  if (hang_ && step_ == hang_->at) {
    spdlog::warn("fault injection ({}): rank {} (pid {}) stops stepping after step {} without exiting",
                 hang_->describe(), rank_, getpid(), step_);
    for (;;) pause();  // a termination signal ends it
  }
  epoch_loss_sum_ += loss;
  epoch_ms_ += ms;
  const double sps = static_cast<double>(epoch_steps_ * global_batch_) / (epoch_ms_ / 1000.0);
  bar_->update(epoch_steps_, loss, sps);
  if (!tty_ && step_ % c_.log_every == 0)
    spdlog::info("step {}/{} loss {:.4f} lr {:.5f} {:.0f} samples/s | step {:.2f} ms: forward {:.2f} "
                 "backward {:.2f} comm {:.2f} exposed {:.2f} optimizer {:.2f}",
                 step_, total_steps_, loss, schedule_->at(step_ - 1), sps, ms, phases.forward_ms, phases.backward_ms,
                 phases.comm_ms, phases.exposed_comm_ms, phases.optimizer_ms);
}

TrainOutcome Trainer::train() {
  tty_ = c_.progress && isatty(STDERR_FILENO) && strategy_->rank() == 0;
  run_t0_ = std::chrono::steady_clock::now();
  for (int64_t epoch = start_.epoch; epoch < c_.epochs && step_ < total_steps_; ++epoch) {
    train_batches_->seek(epoch == start_.epoch ? start_ : LoaderPosition{epoch, 0});
    ProgressBar bar(tty_, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c_.epochs),
                    std::min(steps_per_epoch_, total_steps_ - step_));
    bar_ = &bar;
    epoch_loss_sum_ = epoch_ms_ = 0;
    epoch_steps_ = 0;
    while (step_ < total_steps_) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Batch> micro;
      {
        Tracer::Scope span(tracer_.get(), "load batch");
        for (std::optional<Batch> b; static_cast<int64_t>(micro.size()) < accum_ && (b = train_batches_->next());)
          micro.push_back(std::move(*b));
      }
      if (static_cast<int64_t>(micro.size()) < accum_) break;  // the epoch is over
      train_step(micro, t0);
      if (c_.save_every > 0 && step_ % c_.save_every == 0) save();
      if (elastic_ && step_ % c_.commit_every == 0 && step_ < total_steps_) {
        commit();
        if (pause_agreed()) {
          paused_ = true;
          break;
        }
      }
      if (c_.eval_every > 0 && step_ % c_.eval_every == 0) {
        bar.finish();
        evaluate("every");
      }
      if (stop_agreed()) {
        bar.finish();
        stop_to_resume();
        break;
      }
    }
    bar.finish();
    bar_ = nullptr;
    if (stopped_by_ || paused_) break;
    if (epoch_steps_ == 0) break;
    const bool full_epoch = train_batches_->position().step_in_epoch >= steps_per_epoch_ * accum_;
    if (full_epoch) ++epochs_completed_;
    if (last_eval_step_ != step_) evaluate(full_epoch ? "epoch" : "end");
    spdlog::info("epoch {}/{}{}: train_loss {:.4f} test_loss {:.4f} test_accuracy {:.4f} {:.0f} samples/s", epoch + 1,
                 c_.epochs, full_epoch ? "" : " (partial)", epoch_loss_sum_ / epoch_steps_, last_eval_->loss,
                 last_eval_->metric("accuracy").value_or(0),
                 static_cast<double>(epoch_steps_ * global_batch_) / (epoch_ms_ / 1000.0));
  }
  if (paused_) {
    if (strategy_->rank() == 0)
      spdlog::info("paused at step {} (its commit) for joining nodes: the next generation resumes from it", step_);
    return TrainOutcome::paused;
  }
  if (!stopped_by_) {  // a stop to be resumed leaves the evaluation to the run that finishes
    if (last_eval_step_ != step_) evaluate("end");
    if (!c_.checkpoint_dir.empty() && step_ > 0 && last_saved_step_ != step_) save();
  }

  const RunSummary s = summary();
  spdlog::info("done: {} steps, final_train_loss {}, test_loss {:.4f}, test_accuracy {:.4f}, {:.0f} samples/s{}, "
               "step {:.2f} ms (p50 {:.2f}, p90 {:.2f}), peak RSS {:.0f} MiB, checksum {}",
               s.steps, s.final_train_loss ? fmt::format("{:.4f}", *s.final_train_loss) : "none",
               s.test_loss.value_or(0), s.test_accuracy.value_or(0), s.samples_per_s,
               s.tokens_per_s ? fmt::format(" ({:.0f} tokens/s)", *s.tokens_per_s) : "", s.step_ms.mean, s.step_ms.p50,
               s.step_ms.p90, s.peak_rss_mb, s.param_checksum);
  if (!c_.trace.empty()) tracer_->write(trace_path_for_rank(c_.trace, strategy_->rank(), s.world_size));
  if (!c_.summary_json.empty() && strategy_->rank() == 0) write_summary_json(s, c_.summary_json);
  strategy_->barrier();
  return stopped_by_ ? TrainOutcome::stopped_to_resume : TrainOutcome::finished;
}

RunSummary Trainer::summary() const {
  // Some figures are collectives under DDP (global_loss, replicas_identical, per_rank): every
  // rank computes the summary, rank 0 writes it.
  Strategy& st = *strategy_;
  RunSummary s;
  s.mode = st.mode();
  s.backend = st.backend();
  s.device = device_.str();
  s.model = c_.model;
  if (c_.model == "gpt") s.attention = c_.attention;
  s.world_size = c_.mode == Mode::ddp ? st.replicas() : 1;
  s.replicas = st.replicas();
  s.threads = threads_;
  s.parameters = st.model().num_parameters();
  s.steps = step_;
  s.global_batch = global_batch_;
  s.epochs_completed = epochs_completed_;
  s.timed_steps = static_cast<int64_t>(step_ms_.size());
  s.train_time_s = ms_since(run_t0_) / 1000.0;
  if (!step_ms_.empty()) {
    double total_ms = 0;
    for (double ms : step_ms_) total_ms += ms;
    const double n = static_cast<double>(step_ms_.size());
    s.samples_per_s = n * static_cast<double>(global_batch_) / (total_ms / 1000.0);
    if (data_.text) s.tokens_per_s = s.samples_per_s * static_cast<double>(c_.context);
    s.phase_means = timed_phases_.divided_by(n);
    s.process_cpu_ms = timed_process_cpu_ms_ / n;
    if (comm_cpu_known_) s.comm_cpu_ms = timed_comm_cpu_ms_ / n;
  }
  s.step_ms = step_timing_stats(step_ms_);
  if (trained_any_) s.final_train_loss = st.global_loss(last_loss_);
  if (last_eval_) {
    s.test_loss = last_eval_->loss;
    s.test_accuracy = last_eval_->metric("accuracy");
  }
  s.param_checksum = parameter_checksum(st.model());
  s.buffer_checksum = buffer_checksum(st.model());
  s.sync_batchnorm = c_.sync_bn;
  s.broadcast_buffers = !c_.no_broadcast_buffers;
  s.activation_checkpointing = c_.activation_checkpointing;
  s.prefetch = prefetching(c_, device_);
  s.replicas_identical = st.replicas_identical();
  s.buckets = st.buckets();
  s.grad_ready = st.grad_ready();
  s.bucket_caps = st.bucket_caps();
  s.powersgd = st.powersgd();
  s.peak_rss_mb = peak_rss_mb();
  for (int64_t kib : st.per_rank(static_cast<int64_t>(s.peak_rss_mb * 1024.0)))
    s.peak_rss_mb_per_rank.push_back(static_cast<double>(kib) / 1024.0);
  const std::optional<double> pss = pss_mb();
  for (int64_t kib : st.per_rank(pss ? static_cast<int64_t>(*pss * 1024.0) : -1))
    s.pss_mb_per_rank.push_back(kib < 0 ? std::nullopt : std::optional<double>(static_cast<double>(kib) / 1024.0));
  const size_t temporary = options_.group ? options_.group->peak_temporary_bytes() : 0;
  s.peak_temporary_bytes_per_rank = st.per_rank(static_cast<int64_t>(temporary));
  s.zero = st.zero_stage();
  for (int64_t bytes : st.per_rank(optimizer_state_bytes_))
    s.optimizer_state_mb_per_rank.push_back(static_cast<double>(bytes) / (1024.0 * 1024.0));
  if (device_.is_cuda()) {
    size_t peak = 0;
    const bool dp = c_.mode == Mode::dp;
    for (int d = 0; d < (dp ? c_.devices : 1); ++d)
      peak = std::max(peak, cuda::peak_allocated_bytes(dp ? d : device_.index));
    s.peak_device_memory_mb = static_cast<double>(peak) / (1024.0 * 1024.0);
  }
  s.seed = c_.seed;
  s.precision = precision_str(c_.precision);
  s.grad_reduce_dtype = c_.comm_hook == CommHookKind::none ? "fp32" : comm_hook_str(c_.comm_hook);
  if (!bf16_gemm_.empty()) s.bf16_gemm = bf16_gemm_;
  s.fp32_math = fp32_math_;
  s.cpu_kernels = cpu::cpu_kernel_set();
  s.stopped_by = stopped_by_;
  s.restart_count = restarts_.restart_count;
  s.slurm_restart_count = restarts_.slurm_restart_count;
  s.resumed_from_step = resumed_from_step_;
  if (resumed_from_step_) s.resumed_from = resumed_from_commit_ ? "commit" : "checkpoint";
  s.commits = commits_;
  if (commits_ > 0) s.commit_ms = commit_ms_ / static_cast<double>(commits_);
  if (const char* history = std::getenv("TANDEM_ELASTIC_HISTORY"); history && *history)
    s.elastic_history_json = history;
  s.elastic_batch = elastic_batch_str(c_.elastic_batch);
  s.base_world_size = c_.elastic_base_world > 0 ? c_.elastic_base_world : s.world_size;
  s.batch_size = c_.batch_size;
  s.grad_accum = accum_;
  s.lr = c_.lr;
  s.min_lr = c_.min_lr;
  return s;
}

TrainOutcome run_training(const TrainConfig& config) {
  if (config.sample > 0) {
    set_cpu_threads(default_cpu_threads(config.threads));
    run_sampling(config, resolve_device(config));
    return TrainOutcome::finished;
  }
  const std::unique_ptr<ElasticControl> elastic = ElasticControl::attach(config);
  for (;;) {
    TrainConfig adapted = config;
    try {
      // A later generation of an elastic job resumes from the oldest member's commit.
      if (elastic && read_restart_counts().restart_count > 0) adapted.resume = share_commit(config, *elastic);
      apply_elastic_batch(adapted);  // resuming DDP at another world size (--elastic-batch)
      Trainer trainer(adapted, elastic.get());
      const TrainOutcome outcome = trainer.train();
      if (outcome != TrainOutcome::paused) return outcome;
      elastic->report("paused");
    } catch (const CollectiveError& e) {
      if (!elastic) throw;
      // The group is gone with the Trainer; the commit stays. tandemrun forms the next
      // generation and sends this process its place in it.
      spdlog::error("the process group failed: {}; waiting for tandemrun's next generation (the state rolls back "
                    "to the newest commit)",
                    e.what());
      elastic->report(std::string("lost ") + e.what());
    }
    elastic->await_assignment();
    if (const char* rank = std::getenv("RANK"))
      spdlog::set_level(std::string(rank) == "0" ? spdlog::level::from_str(config.log_level)
                                                 : std::max(spdlog::level::from_str(config.log_level),
                                                            spdlog::level::warn));
  }
}

}  // namespace tandem
