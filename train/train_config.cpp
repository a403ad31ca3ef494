// Flag parsing and validation for tandem-train. Each rejected value names the flag and
// what is accepted. Flags whose capability has not landed yet are accepted by the
// parser (they are part of the contract) and refused here with "not built yet".
#include "train/train_config.h"

#include <CLI/CLI.hpp>
#include <tandem/version.h>
#include <iostream>

namespace tandem {

static void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

namespace {

// The command line as CLI11 fills it: the configuration, the choices still by name (typed
// once, in type_and_check), and the options whose presence a rule reads.
struct Flags {
  TrainConfig c;
  std::string elastic_batch = "auto";
  std::string bucket_cap = "25";
  std::string optimizer = "sgd", mode = "single", device = "cpu", backend = "auto", comm_hook = "none",
              precision = "fp32", grad_reduce_dtype = "fp32", powersgd_gate = "model",
              prefetch = "auto";
  std::vector<CLI::Option*> gpt_flags, resnet_flags, powersgd_flags;
  CLI::Option* checkpointing = nullptr;
  CLI::Option* hidden = nullptr;
  CLI::Option* grad_reduce = nullptr;
  bool no_progress = false;
  bool no_prefetch = false;
};

// The model's flags: which model, and each model's own shape options.
void add_model_flags(CLI::App& app, Flags& f) {
  TrainConfig& c = f.c;
  const auto names = [](std::initializer_list<std::string> v) { return CLI::IsMember(std::vector<std::string>(v)); };

  app.add_option("--model", c.model,
                 "Model: mlp (784-H-H-10), cnn (2 conv blocks, 170k params), resnet (residual network with "
                 "BatchNorm, ResNet-20 style; --depth, --width) or gpt (GPT-2 style character-level transformer; "
                 "needs --data shakespeare or text:PATH)")
      ->check(names({"mlp", "cnn", "resnet", "gpt"}));
  f.hidden = app.add_option("--hidden", c.hidden, "Hidden width of the mlp");
  f.gpt_flags = {
      app.add_option("--n-layer", c.n_layer, "gpt: transformer blocks"),
      app.add_option("--n-head", c.n_head, "gpt: attention heads (must divide --n-embd)"),
      app.add_option("--n-embd", c.n_embd, "gpt: embedding width"),
      app.add_option("--context", c.context, "gpt: context length in characters (training windows are this + 1)"),
      app.add_option("--dropout", c.dropout,
                     "gpt: dropout after the embeddings and on each residual branch (not on attention "
                     "probabilities)"),
      app.add_option("--attention", c.attention,
                     "gpt: materialized (the (B, NH, T, T) probabilities kept for backward; bf16 products under "
                     "--precision bf16) or tiled (flash-style: query and key tiles with an online softmax, only a "
                     "(B, NH, T) log-sum-exp kept, the probabilities recomputed in backward; fp32)")
          ->check(names({"materialized", "tiled"})),
      app.add_option("--sample", c.sample,
                     "gpt: print N characters sampled from --resume's checkpoint instead of training"),
      app.add_option("--temperature", c.temperature, "gpt --sample: softmax temperature"),
      app.add_option("--prompt", c.prompt, "gpt --sample: text the sample continues")->default_str("\\n")};
  f.resnet_flags = {
      app.add_option("--depth", c.depth, "resnet: layers, 6n + 2 (n basic blocks in each of 3 stages): 8, 14, 20, ..."),
      app.add_option("--width", c.width, "resnet: channels of the first stage (doubled at each of the next two)")};
  f.checkpointing = app.add_flag("--activation-checkpointing", c.activation_checkpointing,
                                 "gpt (per block), resnet (per stage): keep only each one's input in forward and "
                                 "recompute its activations in backward (less memory, one more forward)");
}

// Every flag of docs/reference.md's tandem-train, with its help text and accepted names.
void add_flags(CLI::App& app, Flags& f) {
  TrainConfig& c = f.c;
  const auto names = [](std::initializer_list<std::string> v) { return CLI::IsMember(std::vector<std::string>(v)); };

  add_model_flags(app, f);
  app.add_option("--data", c.data,
                 "Data set: fashion-mnist, synthetic (images), shakespeare (tiny Shakespeare, shipped in the "
                 "repository, its sha256 checked) or text:PATH (any text file; byte-level vocabulary; "
                 "first 90% train, last 10% validation)")
      ->check([](const std::string& v) {
        if (v == "fashion-mnist" || v == "synthetic" || v == "shakespeare") return std::string();
        if (v.rfind("text:", 0) == 0 && v.size() > 5) return std::string();
        return std::string("expected fashion-mnist, synthetic, shakespeare or text:PATH, got '" + v + "'");
      });
  app.add_option("--data-dir", c.data_dir, "Directory with Fashion-MNIST's gzip IDX files");
  app.add_option("--synthetic-train", c.synthetic_train, "Training samples of --data synthetic");
  app.add_option("--synthetic-test", c.synthetic_test, "Test samples of --data synthetic");
  app.add_option("--epochs", c.epochs, "Epochs to train");
  app.add_option("--max-steps", c.max_steps, "Stop after this many optimizer steps (0: no limit)");
  app.add_option("--batch-size", c.batch_size, "Batch size per replica (global = this x replicas)");
  app.add_option("--lr", c.lr, "Peak learning rate (after warm-up; cosine decay to --min-lr)");
  app.add_option("--min-lr", c.min_lr, "Learning rate at the end of the cosine decay");
  app.add_option("--warmup-steps", c.warmup_steps, "Linear warm-up steps (-1: 2% of the run)");
  app.add_option("--optimizer", f.optimizer, "Optimizer")->check(names({"sgd", "adamw"}));
  app.add_option("--momentum", c.momentum, "SGD momentum");
  app.add_flag("--nesterov", c.nesterov, "SGD with Nesterov momentum");
  app.add_option("--weight-decay", c.weight_decay,
                 "Weight decay (SGD: L2 on every parameter; AdamW: decoupled, on parameters of two or more "
                 "dimensions only - matrices and embeddings, never biases or LayerNorm - as nanoGPT)");
  app.add_option("--beta1", c.beta1, "AdamW beta1");
  app.add_option("--beta2", c.beta2, "AdamW beta2");
  app.add_option("--clip-grad-norm", c.clip_grad_norm,
                 "Clip gradients to this global L2 norm before each step (0: off); in DDP the norm of the "
                 "all-reduced gradients, the same on every rank");
  app.add_option("--seed", c.seed, "Seed for initialisation, shuffling and dropout");
  app.add_option("--mode", f.mode, "Training mode")->check(names({"single", "dp", "ddp"}));
  app.add_option("--devices", c.devices, "Devices driven by one process in --mode dp");
  app.add_option("--device", f.device, "Device kind")->check(names({"cpu", "cuda"}));
  app.add_option("--threads", c.threads,
                 "BLAS threads (0: OPENBLAS_NUM_THREADS or OMP_NUM_THREADS if set, else all cores)");
  app.add_option("--backend", f.backend, "DDP backend")->check(names({"auto", "mpi", "gloo", "nccl", "shm", "hier"}));
  app.add_option("--collective-timeout-s", c.collective_timeout_s, "Seconds a collective, or the start-up rendezvous, may wait for the other ranks");
  app.add_option("--bucket-cap-mb", f.bucket_cap,
                 "DDP gradient bucket cap in MiB, or auto: chosen by the cost model after the first steps from this "
                 "job's own measurements (docs/scaling.md)");
  app.add_option("--first-bucket-mb", c.first_bucket_mb,
                 "DDP: the first bucket's cap in MiB (the last layers' gradients, which start communicating first); "
                 "at most --bucket-cap-mb");
  app.add_flag("--no-overlap", c.no_overlap, "All-reduce buckets only after backward ends");
  app.add_flag("--no-comm", c.no_comm, "Skip gradient communication (measurement aid)");
  app.add_option("--grad-accum", c.grad_accum, "Micro-steps per optimizer step");
  app.add_option("--prefetch", f.prefetch,
                 "Assemble the next step's batches on a loader thread while this step runs (for --device cuda "
                 "also upload them through the pinned ring); the same batches in the same order. auto: on for "
                 "cuda, off for cpu, where the thread competes with the step for the cores")
      ->check(names({"auto", "on", "off"}));
  app.add_flag("--no-prefetch", f.no_prefetch, "Same as --prefetch off: each batch is assembled after the step before");
  app.add_option("--elastic-batch", f.elastic_batch,
                 "Resuming DDP from a checkpoint, at its world size or another: global keeps the checkpoint's global "
                 "batch (the per-rank batch adapted, else --grad-accum; exit 1 when neither divides), per-rank keeps "
                 "--batch-size and scales --lr and --min-lr by world size / the job's first world size, off changes "
                 "nothing; auto: global under an elastic tandemrun (--nnodes MIN:MAX), else off")
      ->check(names({"auto", "off", "global", "per-rank"}));
  app.add_option("--comm-hook", f.comm_hook,
                 "Gradient compression: fp16, bf16, or powersgd (low-rank factors with error feedback; "
                 "docs/scaling.md)")
      ->check(names({"none", "fp16", "bf16", "powersgd"}));
  f.powersgd_flags.push_back(app.add_option("--powersgd-rank", c.powersgd.rank,
                                            "PowerSGD: columns of the factors P and Q (more: closer to the gradient, "
                                            "more to send)"));
  f.powersgd_flags.push_back(app.add_option("--powersgd-start-step", c.powersgd.start_step,
                                            "PowerSGD: steps all-reduced uncompressed before compression starts"));
  f.powersgd_flags.push_back(
      app.add_option("--powersgd-gate", f.powersgd_gate,
                     "PowerSGD: model compresses only the buckets where the cost model, on this job's own timings, "
                     "predicts a faster step (the log says why); always compresses every matrix that pays in bytes")
          ->check(names({"model", "always"})));
  f.powersgd_flags.push_back(app.add_option("--powersgd-min-compression", c.powersgd.min_compression_rate,
                                            "PowerSGD: a matrix n x m is compressed only when n m exceeds this many "
                                            "times (n + m) x rank; the rest go uncompressed with the 1-D gradients"));
  app.add_option("--precision", f.precision,
                 "Matrix products (linear, conv, LM head) in fp32, or bf16 with f32 accumulation; weights, "
                 "optimizer state, loss and softmax stay f32")
      ->check(names({"fp32", "bf16"}));
  app.add_flag("--tf32", c.tf32,
               "--device cuda: fp32 matrix products on TF32 tensor cores (cuBLAS TF32 math: operands rounded to "
               "10-bit mantissas, f32 sums; PyTorch's allow_tf32 = True). Off: strict fp32");
  f.grad_reduce = app.add_option("--grad-reduce-dtype", f.grad_reduce_dtype,
                                     "DDP: all-reduce gradients in fp32 or bf16 (bf16 is --comm-hook bf16)")
                          ->check(names({"fp32", "bf16"}));
  app.add_flag("--find-unused-parameters", c.find_unused_parameters,
               "DDP: parameters without a gradient in a step count as zero (else that step fails)");
  app.add_flag("--sync-bn", c.sync_bn,
               "dp, ddp: SyncBatchNorm - BatchNorm statistics over the global batch (all replicas), not each "
               "replica's share");
  app.add_flag("--no-broadcast-buffers", c.no_broadcast_buffers,
               "DDP: keep each rank's own buffers (BatchNorm running statistics) instead of rank 0's after every "
               "step");
  app.add_option("--zero", c.zero,
                 "DDP: ZeRO stage. 1 shards the optimizer state across the ranks (gradients reduce-scattered, "
                 "each rank updates its shard, parameters all-gathered); 0 off");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "Directory for checkpoints");
  app.add_option("--save-every", c.save_every, "Save a checkpoint every N steps");
  app.add_option("--resume", c.resume, "Resume: auto or a checkpoint path");
  app.add_option("--keep-last", c.keep_last, "Checkpoints to keep in --checkpoint-dir (0: all)");
  app.add_option("--commit-every", c.commit_every,
                 "Under an elastic tandemrun (--elastic-recovery memory): copy the training state into RAM every N "
                 "steps, the point a change of membership rolls back to and joining nodes are admitted at (0: "
                 "recover from checkpoints)");
  app.add_option("--init-from", c.init_from,
                 "Fine-tune: start from the model weights only of this checkpoint (a step-N directory; a directory "
                 "of them: its newest; or a .safetensors file); every tensor must match unless --init-skip names it");
  app.add_option("--init-skip", c.init_skip,
                 "With --init-from: parameters (names or globs, * and ?) that keep their fresh initialisation, "
                 "and checkpoint tensors to ignore; repeatable or comma-separated")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->delimiter(',');
  app.add_option("--freeze", c.freeze,
                 "Parameters (names or globs, * and ?) that do not train: no gradient, no optimizer state, not "
                 "all-reduced; repeatable or comma-separated")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->delimiter(',');
  app.add_option("--eval-every", c.eval_every, "Also evaluate on the test set every N steps (0: per epoch)");
  app.add_option("--log-every", c.log_every, "Log a line every N steps when not on a terminal");
  app.add_option("--trace", c.trace, "Write a Chrome/Perfetto trace to FILE");
  app.add_option("--summary-json", c.summary_json, "Write the run summary (JSON) to FILE");
  app.add_option("--log-level", c.log_level, "Log level")
      ->check(names({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_flag("--no-progress", f.no_progress, "No progress bar, plain log lines even on a terminal");
}

// The choices typed, then every rule between flags; a broken one is a UsageError naming it.
void type_and_check(Flags& f) {
  TrainConfig& c = f.c;
  c.progress = !f.no_progress;
  c.optimizer = parse_optimizer_kind(f.optimizer);
  c.mode = parse_mode(f.mode);
  c.device = f.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  c.backend = parse_backend(f.backend);
  c.precision = parse_precision(f.precision);
  require(!f.no_prefetch || f.prefetch == "auto" || f.prefetch == "off", "--no-prefetch contradicts --prefetch " + f.prefetch);
  c.prefetch = f.no_prefetch || f.prefetch == "off" ? Prefetch::off
               : f.prefetch == "on"                 ? Prefetch::on
                                                    : Prefetch::automatic;

  const bool gpt = c.model == "gpt";
  for (CLI::Option* o : f.gpt_flags)
    require(gpt || o->count() == 0, o->get_name() + " is a flag of --model gpt, not of --model " + c.model);
  require(!gpt || f.hidden->count() == 0, "--hidden is a flag of --model mlp, not of --model gpt");
  const bool resnet = c.model == "resnet";
  for (CLI::Option* o : f.resnet_flags)
    require(resnet || o->count() == 0, o->get_name() + " is a flag of --model resnet, not of --model " + c.model);
  require(!resnet || f.hidden->count() == 0, "--hidden is a flag of --model mlp, not of --model resnet");
  require(gpt || resnet || !c.activation_checkpointing,
          "--activation-checkpointing needs --model gpt or --model resnet, got --model " + c.model);
  if (resnet) {
    require(c.depth >= 8 && (c.depth - 2) % 6 == 0,
            "--depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, ...), got " + std::to_string(c.depth));
    require(c.width > 0, "--width must be positive, got " + std::to_string(c.width));
  }
  // --sample reads its model and vocabulary from the checkpoint: it needs no --data.
  require(gpt == text_data(c) || (gpt && c.sample > 0),
          gpt ? "--model gpt needs --data shakespeare or --data text:PATH, got --data " + c.data
                                   : "--data " + c.data + " is text: it needs --model gpt");
  if (gpt) {
    require(c.n_layer > 0, "--n-layer must be positive, got " + std::to_string(c.n_layer));
    require(c.n_head > 0, "--n-head must be positive, got " + std::to_string(c.n_head));
    require(c.n_embd > 0, "--n-embd must be positive, got " + std::to_string(c.n_embd));
    require(c.n_embd % c.n_head == 0, "--n-embd (" + std::to_string(c.n_embd) + ") must be divisible by --n-head (" +
                                          std::to_string(c.n_head) + ")");
    require(c.context > 0, "--context must be positive, got " + std::to_string(c.context));
    require(c.dropout >= 0 && c.dropout < 1, "--dropout must be in [0, 1)");
    require(c.sample >= 0, "--sample must be >= 0, got " + std::to_string(c.sample));
    require(c.sample == 0 || !c.resume.empty(), "--sample needs --resume (the checkpoint to sample from)");
    require(c.sample == 0 || c.mode == Mode::single, "--sample runs in --mode single");
    require(c.temperature > 0, "--temperature must be positive");
  }
  require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "--beta1 and --beta2 must be in [0, 1)");
  require(c.clip_grad_norm >= 0, "--clip-grad-norm must be >= 0");

  require(c.hidden > 0, "--hidden must be positive, got " + std::to_string(c.hidden));
  require(c.epochs > 0, "--epochs must be positive, got " + std::to_string(c.epochs));
  require(c.max_steps >= 0, "--max-steps must be >= 0, got " + std::to_string(c.max_steps));
  require(c.batch_size > 0, "--batch-size must be positive, got " + std::to_string(c.batch_size));
  require(c.lr > 0, "--lr must be positive");
  require(c.min_lr >= 0 && c.min_lr <= c.lr, "--min-lr must be in [0, --lr]");
  require(c.momentum >= 0 && c.momentum < 1, "--momentum must be in [0, 1)");
  require(c.weight_decay >= 0, "--weight-decay must be >= 0");
  require(c.synthetic_train > 0 && c.synthetic_test > 0, "--synthetic-train/--synthetic-test must be positive");
  require(c.threads >= 0, "--threads must be >= 0");
  require(c.eval_every >= 0, "--eval-every must be >= 0");
  require(c.log_every > 0, "--log-every must be positive");
  require(c.devices > 0, "--devices must be positive");
  // Upper bounds keep the trainer's conversions (to milliseconds, to bytes) defined.
  require(c.collective_timeout_s > 0 && c.collective_timeout_s <= 1e9,
          "--collective-timeout-s must be positive and at most 1e9 seconds");
  c.bucket_cap_auto = f.bucket_cap == "auto";
  if (!c.bucket_cap_auto) {
    size_t used = 0;
    try {
      c.bucket_cap_mb = std::stod(f.bucket_cap, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used == f.bucket_cap.size() && used > 0,
            "--bucket-cap-mb takes a size in MiB or auto, not '" + f.bucket_cap + "'");
  }
  require(c.bucket_cap_mb > 0 && c.bucket_cap_mb <= 1024 * 1024,
          "--bucket-cap-mb must be positive and at most 1048576 (1 TiB)");
  require(c.first_bucket_mb > 0 && c.first_bucket_mb <= 1024 * 1024,
          "--first-bucket-mb must be positive and at most 1048576 (1 TiB)");
  require(c.grad_accum > 0, "--grad-accum must be positive");
  require(c.save_every >= 0, "--save-every must be >= 0");

  const bool ddp = c.mode == Mode::ddp;
  // --grad-reduce-dtype names the reduction's dtype; the bf16 comm hook is what does it.
  if (f.grad_reduce_dtype == "bf16") {
    require(ddp, "--grad-reduce-dtype bf16 needs --mode ddp (only DDP all-reduces gradients)");
    require(f.comm_hook == "none" || f.comm_hook == "bf16",
            "--grad-reduce-dtype bf16 contradicts --comm-hook " + f.comm_hook);
    f.comm_hook = "bf16";
  } else {
    require(f.grad_reduce->count() == 0 || f.comm_hook == "none",
            "--grad-reduce-dtype fp32 contradicts --comm-hook " + f.comm_hook);
  }
  c.comm_hook = parse_comm_hook(f.comm_hook);
  c.powersgd.gate = f.powersgd_gate == "always" ? PowerSgdGate::always : PowerSgdGate::model;
  const bool powersgd = c.comm_hook == CommHookKind::powersgd;
  for (const CLI::Option* o : f.powersgd_flags)
    require(powersgd || o->count() == 0, o->get_name() + " needs --comm-hook powersgd");
  if (powersgd) {
    require(c.powersgd.rank >= 1 && c.powersgd.rank <= 1024, "--powersgd-rank must be in 1..1024");
    require(c.powersgd.start_step >= 0, "--powersgd-start-step must be >= 0");
    require(c.powersgd.min_compression_rate >= 1, "--powersgd-min-compression must be >= 1");
    require(!c.bucket_cap_auto, "--comm-hook powersgd times the first steps for its gate: give it a fixed "
                                "--bucket-cap-mb, not auto");
    require(!c.no_comm, "--comm-hook powersgd compresses gradient communication: not with --no-comm");
  }
  c.elastic_batch = f.elastic_batch == "global"     ? ElasticBatch::global
                    : f.elastic_batch == "per-rank" ? ElasticBatch::per_rank
                    : f.elastic_batch == "off"      ? ElasticBatch::off
                                                    : ElasticBatch::automatic;
  const bool hooked = c.comm_hook != CommHookKind::none;
  require(ddp || !c.no_overlap, "--no-overlap needs --mode ddp");
  require(ddp || !c.no_comm, "--no-comm needs --mode ddp");
  require(ddp || !c.bucket_cap_auto, "--bucket-cap-mb auto needs --mode ddp");
  require(!c.bucket_cap_auto || !c.no_comm, "--bucket-cap-mb auto measures the communication: not with --no-comm");
  require(ddp || !hooked, "--comm-hook needs --mode ddp");
  require(ddp || c.backend == Backend::automatic, "--backend needs --mode ddp");
  require(ddp || !c.find_unused_parameters, "--find-unused-parameters needs --mode ddp");
  require(ddp || !c.no_broadcast_buffers, "--no-broadcast-buffers needs --mode ddp");
  require(c.zero == 0 || c.zero == 1, "--zero " + std::to_string(c.zero) +
                                          " is not built: 0 (off) or 1 (shard the optimizer state)");
  if (c.zero > 0) {
    require(ddp, "--zero 1 needs --mode ddp (it shards the optimizer state across DDP processes), got --mode " +
                     f.mode);
    require(!hooked, "--zero 1 reduce-scatters gradients in fp32: it takes no --comm-hook " + f.comm_hook +
                         " (nor --grad-reduce-dtype bf16)");
    require(!c.no_comm, "--zero 1 needs gradient communication: it cannot run with --no-comm");
    require(!c.bucket_cap_auto, "--zero 1 lays the optimizer state's shards along the buckets as first cut: it takes "
                                "a fixed --bucket-cap-mb, not auto");
    require(c.device != DeviceKind::cuda || !host_staged_backend(c),
            "--zero 1 with --device cuda needs --backend nccl (" + f.backend +
                " stages GPU buckets through host memory)");
  }

  require(c.mode == Mode::dp || c.devices == 1, "--devices needs --mode dp");
  require(c.backend != Backend::nccl || c.device == DeviceKind::cuda, "--backend nccl needs --device cuda");
  require(!c.tf32 || c.device == DeviceKind::cuda,
          "--tf32 needs --device cuda (TF32 is a CUDA tensor-core math mode; the CPU computes strict fp32)");
  require(!hooked || c.comm_hook == CommHookKind::powersgd || c.device != DeviceKind::cuda || !host_staged_backend(c),
          "--comm-hook " + f.comm_hook + " with --device cuda needs --backend nccl (mpi, gloo, shm and hier stage GPU "
          "buckets through host memory, uncompressed)");
  require(c.save_every == 0 || !c.checkpoint_dir.empty(), "--save-every needs --checkpoint-dir");
  require(c.resume != "auto" || !c.checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
  require(c.keep_last >= 0, "--keep-last must be >= 0");
  require(c.commit_every >= 0, "--commit-every must be >= 0");
  for (const std::string& p : c.freeze) require(!p.empty(), "--freeze: an empty pattern");
  for (const std::string& p : c.init_skip) require(!p.empty(), "--init-skip: an empty pattern");
  require(c.init_skip.empty() || !c.init_from.empty(), "--init-skip needs --init-from");
  require(c.sample == 0 || (c.init_from.empty() && c.freeze.empty()),
          "--sample reads its model from --resume: it takes no --init-from or --freeze");
}

}  // namespace

std::optional<TrainConfig> parse_train_args(int argc, char** argv) {
  Flags f;
  CLI::App app{"tandem-train: train a model on one process, one device per replica "
               "(--mode single|dp|ddp). Every flag, variable and exit code: docs/reference.md.",
               "tandem-train"};
  app.set_version_flag("--version", std::string("tandem-train ") + TANDEM_VERSION_STRING, "Print the version and exit");
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::CallForVersion&) {
    std::cout << "tandem-train " << TANDEM_VERSION_STRING << "\n";
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  type_and_check(f);
  return f.c;
}

}  // namespace tandem
