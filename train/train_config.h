// tandem-train's configuration: every flag of docs/reference.md's tandem-train, parsed with
// CLI11 and typed once, here: the choices are the API's enums (Mode, Backend, OptimizerKind,
// CommHookKind, Precision), so nothing past the command line parses a string again. Parsing never exits: it throws UsageError (exit 2) or returns a config, or
// returns nullopt after printing --help (exit 0); main decides the exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "runtime/optim/optimizer.h"
#include "runtime/precision.h"
#include "runtime/strategy/comm_hook.h"
#include "runtime/strategy/parallel.h"

namespace tandem {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ElasticBatch { automatic, off, global, per_rank };
// --prefetch: assemble (and for CUDA upload) the next batch on a thread during the step.
// automatic: on for --device cuda, off for cpu (docs/reference.md gives the measurements).
enum class Prefetch { automatic, on, off };

struct TrainConfig {
  // model and data
  std::string model = "mlp";
  int64_t hidden = 512;
  // gpt
  int64_t n_layer = 4, n_head = 4, n_embd = 128, context = 64;
  float dropout = 0.0f;
  std::string attention = "materialized";  // --attention materialized | tiled (runtime/layers/attention.h)
  // resnet (zoo/resnet.h)
  int64_t depth = 20, width = 16;
  // gpt (per block) and resnet (per stage): recompute activations in backward
  bool activation_checkpointing = false;
  std::string data = "fashion-mnist";  // fashion-mnist | synthetic | shakespeare | text:PATH
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t synthetic_train = 60000, synthetic_test = 10000;
  // schedule
  int64_t epochs = 10;
  int64_t max_steps = 0;  // 0: no limit beyond epochs
  int64_t batch_size = 128;  // per replica
  float lr = 0.05f;
  int64_t warmup_steps = -1;  // -1: 2% of the run's steps
  float min_lr = 0.0f;
  OptimizerKind optimizer = OptimizerKind::sgd;  // --optimizer sgd | adamw
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float clip_grad_norm = 0.0f;  // 0: no clipping
  uint64_t seed = 0;
  // placement and distribution
  Mode mode = Mode::single;  // --mode single | dp | ddp
  int devices = 1;
  DeviceKind device = DeviceKind::cpu;  // --device cpu | cuda
  int threads = 0;              // BLAS threads; 0: from OPENBLAS_NUM_THREADS/OMP_NUM_THREADS or all cores
  Backend backend = Backend::automatic;  // --backend auto | mpi | gloo | nccl | shm | hier
  double collective_timeout_s = 600;
  double bucket_cap_mb = 25;
  bool bucket_cap_auto = false;  // --bucket-cap-mb auto: the cost model chooses (docs/scaling.md)
  double first_bucket_mb = 1;    // the first bucket's cap (at most the cap)
  bool no_overlap = false;
  bool no_comm = false;
  int64_t grad_accum = 1;
  Prefetch prefetch = Prefetch::automatic;  // --prefetch auto | on | off (--no-prefetch: off)
  // --elastic-batch (train/elastic_batch.h): resuming at another world size, keep the
  // global batch (global), or the per-rank batch with the learning rate scaled (per_rank),
  // or change nothing (off). automatic: global under an elastic tandemrun, else off.
  ElasticBatch elastic_batch = ElasticBatch::automatic;
  // The world size the job first ran at (carried in checkpoints); 0: this run's.
  int64_t elastic_base_world = 0;
  CommHookKind comm_hook = CommHookKind::none;  // --comm-hook none | fp16 | bf16 | powersgd
  // --powersgd-rank, --powersgd-start-step, --powersgd-gate, --powersgd-min-compression
  PowerSgdOptions powersgd;
  // mixed precision (docs/precision.md): matrix products in bf16; gradients reduced in
  // bf16 through the bf16 comm hook (parsing sets comm_hook = CommHookKind::bf16)
  Precision precision = Precision::fp32;  // --precision fp32 | bf16
  // --tf32 (--device cuda only): fp32 matrix products on TF32 tensor cores (cuBLAS's
  // CUBLAS_TF32_TENSOR_OP_MATH), PyTorch's allow_tf32; off: strict fp32
  bool tf32 = false;
  // --grad-reduce-dtype fp32 | bf16 is folded into comm_hook (bf16: CommHookKind::bf16)
  bool find_unused_parameters = false;
  bool sync_bn = false;                // dp, ddp: SyncBatchNorm (statistics over the global batch)
  bool no_broadcast_buffers = false;  // ddp: keep each rank's own buffers (no per-step broadcast)
  int zero = 0;  // ZeRO stage (docs/zero.md): 1 shards the optimizer state across DDP ranks
  // checkpoints
  std::string checkpoint_dir;
  int64_t save_every = 0;
  std::string resume;
  int keep_last = 3;
  // Under an elastic tandemrun's in-memory recovery (train/elastic_worker.h): keep a copy
  // of the training state in RAM every this many steps; 0: recover from checkpoints.
  int64_t commit_every = 10;
  // fine-tuning (train/fine_tune.h): start from another run's weights, train only some
  std::string init_from;               // --init-from CKPT: model weights only (load_weights)
  std::vector<std::string> init_skip;  // --init-skip PATTERN: parameters that keep their fresh initialisation
  std::vector<std::string> freeze;     // --freeze PATTERN: parameters that do not train (runtime/freeze.h)
  // reporting
  int64_t eval_every = 0;
  int64_t log_every = 50;
  std::string trace;
  std::string summary_json;
  std::string log_level = "info";
  bool progress = true;  // progress bar when stderr is a terminal
  // generation (--model gpt): print this many sampled characters from --resume's checkpoint
  int64_t sample = 0;
  float temperature = 1.0f;
  std::string prompt = "\n";
};

// --data text:PATH's path, or "" for the other data sets.
inline std::string text_data_path(const TrainConfig& c) {
  return c.data.rfind("text:", 0) == 0 ? c.data.substr(5) : std::string();
}
inline bool text_data(const TrainConfig& c) { return c.data == "shakespeare" || c.data.rfind("text:", 0) == 0; }

// Returns nullopt when --help was printed.
std::optional<TrainConfig> parse_train_args(int argc, char** argv);

// mpi, gloo, shm and hier reduce host memory: with --device cuda, DDP stages its GPU buckets through
// pinned host memory (uncompressed), and several ranks may share one GPU.
inline bool host_staged_backend(const TrainConfig& c) {
  return c.backend == Backend::mpi || c.backend == Backend::gloo || c.backend == Backend::shm ||
         c.backend == Backend::hier;
}

}  // namespace tandem
