// tandem-train's loop. Timing: a step's wall time runs from fetching its batch to the
// end of the optimizer update; the first steps (warm-up: allocator, caches, BLAS
// buffers) are excluded from samples_per_s and the phase means.
#include "models/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <spdlog/spdlog.h>
#include <thread>

#include "models/progress.h"
#include "models/summary.h"
#include "models/generate.h"
#include "models/zoo.h"
#include "runtime/data/dataset.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/loader.h"
#include "runtime/data/text.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/bf16_gemm.h"
#include "runtime/precision.h"
#include "runtime/allocator.h"
#include "runtime/cuda_device.h"
#include "runtime/kernels.h"
#include "collectives/fault_injection.h"
#include "collectives/init.h"
#include "runtime/strategy/parallel.h"
#include "runtime/trace.h"

namespace tandem {
namespace {


struct Data {
  std::shared_ptr<const Dataset> train, test;  // images
  std::shared_ptr<const TextDataset> text;     // --data shakespeare | text:PATH
};

Data load_data(const TrainConfig& c) {
  Data d;
  if (text_data(c)) {
    // A text file that cannot serve (missing, empty, too short, a changed shakespeare copy)
    // is bad input: a usage error that names the file.
    try {
      if (c.data == "shakespeare")
        d.text = std::make_shared<const TextDataset>(
            load_text(default_shakespeare_path(), "shakespeare", std::string(kShakespeareSha256), c.context));
      else
        d.text = std::make_shared<const TextDataset>(load_text(text_data_path(c), c.data, std::nullopt, c.context));
    } catch (const std::runtime_error& e) {
      throw UsageError(std::string("--data ") + c.data + ": " + e.what());
    }
  } else if (c.data == "fashion-mnist") {
    d.train = std::make_shared<const Dataset>(load_fashion_mnist(c.data_dir, true));
    d.test = std::make_shared<const Dataset>(load_fashion_mnist(c.data_dir, false));
  } else {
    d.train = std::make_shared<const Dataset>(make_synthetic(c.synthetic_train, c.seed, true));
    d.test = std::make_shared<const Dataset>(make_synthetic(c.synthetic_test, c.seed, false));
  }
  return d;
}

// --device cuda: single and dp start at GPU 0; a DDP rank takes the GPU of its LOCAL_RANK
// (modulo the visible GPUs for the host-staged backends).
Device resolve_device(const TrainConfig& c) {
  if (c.device == "cpu") return Device::cpu();
  const int visible = cuda_device_count();
  if (visible == 0)
    throw std::runtime_error("--device cuda: no CUDA GPU is visible to this process (or this build has no CUDA)");
  int index = 0;
  if (c.mode == "ddp") {
    index = read_launch_env().local_rank;
    // Host-staged backends (mpi, gloo, shm, hier) let several ranks share a GPU: wrap around. NCCL
    // needs one GPU per rank, so a LOCAL_RANK past the visible count is an error below.
    if (host_staged_backend(c)) index %= visible;
  }
  const int needed = c.mode == "dp" ? c.devices : index + 1;
  if (needed > visible)
    throw std::runtime_error("--device cuda: " + std::string(c.mode == "dp" ? "--devices " : "LOCAL_RANK ") +
                             std::to_string(c.mode == "dp" ? c.devices : index) + " needs " + std::to_string(needed) +
                             " GPUs but " + std::to_string(visible) + " are visible");
  cuda::set_device(index);
  return Device::cuda(index);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// --sample N: the model and vocabulary come from the checkpoint, not from the flags.
void run_sampling(const TrainConfig& c, Device device) {
  // stdout carries the sample alone: the log's info lines (stdout) are held back.
  if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  const std::string path = resolve_resume(c.resume, c.checkpoint_dir);
  if (path.empty()) throw UsageError("--sample: no checkpoint found to sample from (--resume " + c.resume + ")");
  const CheckpointMeta meta = read_checkpoint_meta(path);
  GptModel model(gpt_config_from_meta(meta), c.seed);
  model.to(device);
  load_checkpoint(path, model, nullptr);
  SampleOptions so;
  so.length = c.sample;
  so.temperature = c.temperature;
  so.seed = c.seed;
  so.prompt = c.prompt;
  std::string text;
  try {
    text = sample_text(model, vocab_from_meta(meta), so);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::fprintf(stderr, "tandem-train: %lld characters sampled from %s (step %lld), temperature %g, seed %llu\n",
               static_cast<long long>(c.sample), path.c_str(), static_cast<long long>(meta.step),
               static_cast<double>(c.temperature), static_cast<unsigned long long>(c.seed));
  std::fwrite(c.prompt.data(), 1, c.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

void run_training(const TrainConfig& c) {
  const int threads = c.mode == "dp" ? 1 : default_cpu_threads(c.threads);
  set_cpu_threads(threads);
  const Device device = resolve_device(c);
  if (c.sample > 0) return run_sampling(c, device);

  Data data = load_data(c);
  ModelConfig mc;
  mc.name = c.model;
  mc.hidden = c.hidden;
  if (data.text) {
    mc.in_channels = mc.height = mc.width = 0;
    mc.classes = data.text->vocab_size();
    mc.gpt = GptConfig{data.text->vocab_size(), c.n_layer, c.n_head, c.n_embd, c.context, c.dropout};
  } else {
    mc.in_channels = data.train->channels;
    mc.height = data.train->height;
    mc.width = data.train->width;
    mc.classes = data.train->classes;
  }

  OptimizerConfig oc;
  oc.kind = parse_optimizer_kind(c.optimizer);
  oc.momentum = c.momentum;
  oc.nesterov = c.nesterov;
  oc.weight_decay = c.weight_decay;
  oc.beta1 = c.beta1;
  oc.beta2 = c.beta2;
  oc.clip_grad_norm = c.clip_grad_norm;

  // The strategy comes from the public API's parallelize(), as a user's would.
  ParallelOptions po;
  po.mode = parse_mode(c.mode);
  po.device = device;
  po.devices = c.mode == "dp" ? c.devices : 1;
  po.backend = parse_backend(c.backend);
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.collective_timeout_s * 1000));
  po.bucket_cap_mb = c.bucket_cap_mb;
  po.overlap = !c.no_overlap;
  po.communicate = !c.no_comm;
  po.find_unused_parameters = c.find_unused_parameters;
  po.comm_hook = parse_comm_hook(c.comm_hook);
  po.precision = parse_precision(c.precision);
  po.cpu_threads = threads;
  po.zero_stage = c.zero;
  // Which bf16 GEMM runs: the CPU's choice (bf16_gemm.h) or cuBLAS; null under fp32.
  const std::string bf16_gemm = po.precision != Precision::bf16 ? ""
                                : device.is_cuda()               ? "cublas"
                                : cpu::bf16_gemm_path() == cpu::Bf16GemmPath::native ? "native"
                                                                                     : "fallback";
  if (!bf16_gemm.empty())
    spdlog::info("precision bf16: matrix products in bf16 with f32 accumulation ({}), gradients reduced in {}",
                 device.is_cuda() ? "cuBLAS" : cpu::bf16_gemm_path_str(cpu::bf16_gemm_path()),
                 c.comm_hook == "bf16" ? "bf16" : "fp32");
  int tracer_rank = 0;
  std::optional<FaultPlan> hang;  // TANDEM_FAULT=hang-at-step:S (collectives/fault_injection.h)
  if (po.mode == Mode::ddp) {
    po.group = init_group(po);  // first: the tracer and the log level depend on the rank
    tracer_rank = po.group->rank();
    hang = FaultPlan::from_env(tracer_rank);
    if (hang && hang->kind != FaultPlan::Kind::hang_at_step) hang.reset();  // the group's to inject
    if (tracer_rank != 0 && spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  }
  std::unique_ptr<Tracer> tracer = c.trace.empty() ? std::make_unique<Tracer>() : std::make_unique<Tracer>(tracer_rank);
  // A fatal error from here on dumps the flight recorder (docs/failures.md).
  DumpOnFatalError dump_on_error(po.group);
  std::unique_ptr<Strategy> strategy = parallelize([&] { return build_model(mc, c.seed); }, oc, po, tracer.get());
  const int replicas = strategy->replicas();
  const int64_t optimizer_state_bytes = strategy->optimizer().state_bytes();
  if (strategy->zero_stage() > 0) {
    // What a plain run's optimizer would hold: every slot of every parameter element, f32.
    const double full = static_cast<double>(strategy->optimizer().slot_names().size()) *
                        static_cast<double>(strategy->model().num_parameters()) * 4.0 / (1024.0 * 1024.0);
    const double mine = static_cast<double>(optimizer_state_bytes) / (1024.0 * 1024.0);
    spdlog::info("zero-1: optimizer state {:.1f} MiB per rank instead of {:.1f} MiB (saved {:.1f} MiB), "
                 "shards of {} buckets over {} ranks",
                 mine, full, full - mine, strategy->buckets().size(), replicas);
  }

  // DDP ranks each load their shard; DataParallel loads the global batch and scatters it.
  const bool ddp = strategy->mode() == std::string("ddp");
  std::unique_ptr<BatchSource> train_source, test_source;
  if (data.text) {
    train_source = training_batches(data.text, c.context, c.batch_size, *strategy, c.seed);
    // Every rank evaluates the same fixed windows: test_loss is comparable across runs. Batches
    // of 12 windows: the activations of a training batch, not 4x them at the peak.
    test_source = std::make_unique<TextEvalLoader>(data.text, c.context, 12);
  } else {
    train_source = training_batches(data.train, c.batch_size, *strategy, c.seed);
    test_source = evaluation_batches(data.test);
  }
  BatchSource& train_loader = *train_source;
  BatchSource& test_loader = *test_source;
  const int64_t train_size = data.text ? data.text->train_tokens : data.train->size;
  const int64_t test_size = data.text ? kDefaultEvalWindows : data.test->size;
  const int64_t tokens_per_sample = data.text ? c.context : 1;

  const int64_t accum = c.grad_accum;
  const int64_t steps_per_epoch = train_loader.steps_per_epoch() / accum;
  if (steps_per_epoch == 0)
    throw std::runtime_error("the training set (" + std::to_string(train_size) +
                             " samples) is smaller than one global batch of " +
                             std::to_string(c.batch_size * replicas * accum));
  int64_t total_steps = steps_per_epoch * c.epochs;
  if (c.max_steps > 0) total_steps = std::min(total_steps, c.max_steps);
  const int64_t warmup = c.warmup_steps >= 0 ? c.warmup_steps : total_steps / 50;
  LrSchedule schedule(c.lr, warmup, total_steps, c.min_lr);
  const int64_t global_batch = c.batch_size * replicas * accum;
  const int64_t untimed = total_steps > 1 ? std::min<int64_t>(5, std::max<int64_t>(1, total_steps / 10)) : 0;

  spdlog::info("{}: model {} ({} parameters), {} {} train / {} test, global batch {}, {} steps "
               "({} per epoch), {} threads, lr {} (warm-up {} steps, cosine), {}",
               strategy->mode(), c.model, strategy->model().num_parameters(), c.data, train_size,
               test_size, global_batch, total_steps, steps_per_epoch, threads, c.lr, warmup,
               c.optimizer);

  // Resume (every rank and mode loads: DDP ranks need their optimizer state; DP loads into
  // device 0's replica, which the next step broadcasts).
  int64_t step = 0;
  LoaderPosition start{0, 0};
  const std::string resume_from = resolve_resume(c.resume, c.checkpoint_dir);
  if (!resume_from.empty()) {
    CheckpointMeta m;
    // Under ZeRO every rank loads the full state and keeps its shard of it.
    strategy->with_full_optimizer(FullState::write, [&](Optimizer& full) {
      m = load_checkpoint(resume_from, strategy->model(), &full);
    });
    if (m.seed != c.seed || m.dataset != c.data)
      spdlog::warn("resuming a run of --data {} --seed {} with --data {} --seed {}: the data order differs",
                   m.dataset, m.seed, c.data, c.seed);
    std::map<std::string, uint64_t> counters;
    for (const auto& [key, value] : m.extra)
      if (key.rfind("counter.", 0) == 0) counters[key.substr(8)] = std::stoull(value);
    strategy->set_counters(counters);
    step = m.step;
    start = m.position_for(train_loader.batch_size(), train_loader.replicas());
    // Saved right after an epoch's last step: the loop would have moved on to the next epoch.
    if (start.step_in_epoch + accum > train_loader.steps_per_epoch()) start = {start.epoch + 1, 0};
  }
  int64_t last_saved_step = resume_from.empty() ? -1 : step;
  auto save = [&] {
    last_saved_step = step;
    // Replicas are identical; one writer. Under ZeRO every rank takes part in gathering
    // the optimizer state's shards (with_full_optimizer), and rank 0 writes it.
    if (strategy->rank() != 0 && strategy->zero_stage() == 0) return;
    CheckpointMeta m;
    m.step = step;
    m.epoch = train_loader.position().epoch;
    m.step_in_epoch = train_loader.position().step_in_epoch;
    m.seed = c.seed;
    m.dataset = c.data;
    m.batch_size = train_loader.batch_size();
    m.replicas = train_loader.replicas();
    m.grad_accum = accum;
    m.model_name = mc.name;
    m.hidden = mc.hidden;
    m.input_shape = data.text ? Shape{c.context} : Shape{mc.in_channels, mc.height, mc.width};
    m.classes = mc.classes;
    if (data.text) save_gpt_meta(mc.gpt, *data.text, m);
    m.lr_schedule = LrScheduleInfo{"warmup_cosine", c.lr, c.min_lr, warmup, total_steps};
    for (const auto& [name, value] : strategy->model().counters()) m.extra["counter." + name] = std::to_string(value);
    m.mode = strategy->mode();
    m.world_size = strategy->mode() == std::string("ddp") ? replicas : 1;
    strategy->with_full_optimizer(FullState::read, [&](Optimizer& full) {
      if (strategy->rank() == 0) save_checkpoint(c.checkpoint_dir, strategy->model(), full, m, c.keep_last);
    });
  };

  if (strategy->rank() == 0) {
    if (auto warning = cpu::blas_core_warning()) spdlog::warn("{}", *warning);
  }
  const bool tty = c.progress && isatty(STDERR_FILENO) && strategy->rank() == 0;
  std::vector<double> step_ms;
  PhaseTimes timed_phases;
  double last_loss = 0;
  bool trained_any = false;  // false when resumed at or past --max-steps
  int64_t steps_this_run = 0;
  std::optional<EvalResult> last_eval;
  int64_t last_eval_step = -1;
  int64_t epochs_completed = start.epoch;
  auto run_t0 = std::chrono::steady_clock::now();

  auto evaluate = [&](const char* when) {
    last_eval = strategy->evaluate(test_loader);
    last_eval_step = step;
    spdlog::info("eval ({}) step {}: test_loss {:.4f} test_accuracy {:.4f}", when, step, last_eval->loss,
                 last_eval->metric("accuracy").value_or(0));
  };

  for (int64_t epoch = start.epoch; epoch < c.epochs && step < total_steps; ++epoch) {
    train_loader.seek(epoch == start.epoch ? start : LoaderPosition{epoch, 0});
    ProgressBar bar(tty, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c.epochs),
                    std::min(steps_per_epoch, total_steps - step));
    double epoch_loss_sum = 0, epoch_ms = 0;
    int64_t epoch_steps = 0;
    while (step < total_steps) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<Batch> micro;
      {
        Tracer::Scope span(tracer.get(), "load batch");
        while (static_cast<int64_t>(micro.size()) < accum) {
          std::optional<Batch> batch = train_loader.next();
          if (!batch) break;
          micro.push_back(std::move(*batch));
        }
      }
      if (static_cast<int64_t>(micro.size()) < accum) break;
      PhaseTimes phases;
      StepOutput out = strategy->forward_backward(micro, phases);
      {
        Tracer::Scope span(tracer.get(), "optimizer step");
        strategy->step(schedule.at(step), phases);
      }
      phases.resolve();  // the step's one wait for the device: its phase times
      const double loss = out.loss();
      double ms = ms_since(t0);
      last_loss = loss;
      trained_any = true;
      if (steps_this_run++ >= untimed) {  // warm-up counted from this process's start
        step_ms.push_back(ms);
        timed_phases += phases;
      }
      ++step;
      ++epoch_steps;
      if (po.group) po.group->health().step_done(step);  // tandemrun --hang-timeout-s watches it
      if (hang && step == hang->at) {
        spdlog::warn("fault injection ({}): rank {} (pid {}) stops stepping after step {} without exiting",
                     hang->describe(), tracer_rank, getpid(), step);
        for (;;) pause();  // a termination signal ends it
      }
      epoch_loss_sum += loss;
      epoch_ms += ms;
      const double sps = static_cast<double>(epoch_steps * global_batch) / (epoch_ms / 1000.0);
      bar.update(epoch_steps, loss, sps);
      if (!tty && step % c.log_every == 0)
        spdlog::info("step {}/{} loss {:.4f} lr {:.5f} {:.0f} samples/s | step {:.2f} ms: forward {:.2f} "
                     "backward {:.2f} comm {:.2f} exposed {:.2f} optimizer {:.2f}",
                     step, total_steps, loss, schedule.at(step - 1), sps, ms, phases.forward_ms,
                     phases.backward_ms, phases.comm_ms, phases.exposed_comm_ms, phases.optimizer_ms);
      if (c.save_every > 0 && step % c.save_every == 0) save();
      if (c.eval_every > 0 && step % c.eval_every == 0) {
        bar.finish();
        evaluate("every");
      }
    }
    bar.finish();
    if (epoch_steps == 0) break;
    const bool full_epoch = train_loader.position().step_in_epoch >= steps_per_epoch * accum;
    if (full_epoch) ++epochs_completed;
    if (last_eval_step != step) evaluate(full_epoch ? "epoch" : "end");
    spdlog::info("epoch {}/{}{}: train_loss {:.4f} test_loss {:.4f} test_accuracy {:.4f} {:.0f} samples/s",
                 epoch + 1, c.epochs, full_epoch ? "" : " (partial)", epoch_loss_sum / epoch_steps,
                 last_eval->loss, last_eval->metric("accuracy").value_or(0),
                 static_cast<double>(epoch_steps * global_batch) / (epoch_ms / 1000.0));
  }
  if (last_eval_step != step) evaluate("end");
  if (!c.checkpoint_dir.empty() && step > 0 && last_saved_step != step) save();

  RunSummary s;
  s.mode = strategy->mode();
  s.backend = strategy->backend();
  s.device = device.str();
  s.model = c.model;
  s.world_size = ddp ? replicas : 1;
  s.replicas = replicas;
  s.threads = threads;
  s.parameters = strategy->model().num_parameters();
  s.steps = step;
  s.global_batch = global_batch;
  s.epochs_completed = epochs_completed;
  s.timed_steps = static_cast<int64_t>(step_ms.size());
  s.train_time_s = ms_since(run_t0) / 1000.0;
  double timed_total_ms = 0;
  for (double ms : step_ms) timed_total_ms += ms;
  if (!step_ms.empty()) {
    const double n = static_cast<double>(step_ms.size());
    s.samples_per_s = n * static_cast<double>(global_batch) / (timed_total_ms / 1000.0);
    if (data.text) s.tokens_per_s = s.samples_per_s * static_cast<double>(tokens_per_sample);
    s.phase_means = timed_phases.divided_by(n);
  }
  s.step_ms = step_timing_stats(step_ms);
  if (trained_any) s.final_train_loss = strategy->global_loss(last_loss);
  if (last_eval) {
    s.test_loss = last_eval->loss;
    s.test_accuracy = last_eval->metric("accuracy");
  }
  s.param_checksum = parameter_checksum(strategy->model());
  s.replicas_identical = strategy->replicas_identical();
  s.buckets = strategy->buckets();
  s.peak_rss_mb = peak_rss_mb();
  for (int64_t kib : strategy->per_rank(static_cast<int64_t>(s.peak_rss_mb * 1024.0)))
    s.peak_rss_mb_per_rank.push_back(static_cast<double>(kib) / 1024.0);
  s.zero = strategy->zero_stage();
  for (int64_t bytes : strategy->per_rank(optimizer_state_bytes))
    s.optimizer_state_mb_per_rank.push_back(static_cast<double>(bytes) / (1024.0 * 1024.0));
  if (device.is_cuda()) {
    size_t peak = 0;
    for (int d = 0; d < (c.mode == "dp" ? c.devices : 1); ++d)
      peak = std::max(peak, cuda::peak_allocated_bytes(c.mode == "dp" ? d : device.index));
    s.peak_device_memory_mb = static_cast<double>(peak) / (1024.0 * 1024.0);
  }
  s.seed = c.seed;
  s.precision = c.precision;
  s.grad_reduce_dtype = c.comm_hook == "none" ? "fp32" : c.comm_hook;  // the comm hook's dtype
  if (!bf16_gemm.empty()) s.bf16_gemm = bf16_gemm;
  spdlog::info("done: {} steps, final_train_loss {}, test_loss {:.4f}, test_accuracy {:.4f}, {:.0f} samples/s{}, "
               "step {:.2f} ms (p50 {:.2f}, p90 {:.2f}), peak RSS {:.0f} MiB, checksum {}",
               s.steps, s.final_train_loss ? fmt::format("{:.4f}", *s.final_train_loss) : "none",
               s.test_loss.value_or(0), s.test_accuracy.value_or(0), s.samples_per_s,
               s.tokens_per_s ? fmt::format(" ({:.0f} tokens/s)", *s.tokens_per_s) : "", s.step_ms.mean,
               s.step_ms.p50, s.step_ms.p90, s.peak_rss_mb, s.param_checksum);
  if (!c.trace.empty()) tracer->write(trace_path_for_rank(c.trace, strategy->rank(), s.world_size));
  if (!c.summary_json.empty() && strategy->rank() == 0) write_summary_json(s, c.summary_json);
  strategy->barrier();
}

}  // namespace tandem
