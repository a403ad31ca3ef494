// parallelize: one call from a model to a training strategy in any mode, the way
// tandem-train builds its own (the public API's entry point: docs/api.md).
//   single  the model on one device
//   dp      `devices` replicas in this process, one thread each (DataParallel)
//   ddp     one replica per process, gradients all-reduced while backward runs; the
//           process group comes from the environment tandemrun or mpirun set, unless
//           options.group is given
// Also the loaders that go with a strategy: each replica's share of the global batch.
// Invariant: the same make_model and seed give the same result in every mode (the
// strategies' invariant, runtime/strategy/strategy.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "tandem/collectives/init.h"
#include "tandem/runtime/data/loader.h"
#include "tandem/runtime/data/text.h"
#include "tandem/runtime/precision.h"
#include "tandem/runtime/strategy/comm_hook.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/trace.h"

namespace tandem {

enum class Mode : uint8_t { single, dp, ddp };
const char* mode_str(Mode mode);         // "single", "dp", "ddp"
Mode parse_mode(std::string_view name);  // throws std::invalid_argument listing the names

// BLAS threads for one process: `requested` when > 0, else OPENBLAS_NUM_THREADS or
// OMP_NUM_THREADS when set, else the cores divided among this node's processes
// (LOCAL_WORLD_SIZE from tandemrun, OMPI_COMM_WORLD_LOCAL_SIZE from mpirun).
int default_cpu_threads(int requested = 0);

struct ParallelOptions {
  Mode mode = Mode::single;
  // BLAS threads parallelize() sets for this process: 0 = default_cpu_threads(); dp always
  // uses 1 (each replica is a thread of its own).
  int cpu_threads = 0;
  // single and ddp: the replica's device; dp over CUDA: devices 0..devices-1 of its kind.
  Device device = Device::cpu();
  int devices = 1;  // dp: replicas in this process
  // ddp: the group (null: init_process_group from the environment with the options
  // below), the timeout of every collective, and the reducer's options.
  std::shared_ptr<ProcessGroup> group;
  Backend backend = Backend::automatic;
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;    // the first bucket's cap (at most bucket_cap_mb)
  // The caps chosen by the cost model after the first steps (ReducerOptions::auto_buckets_after).
  bool bucket_cap_auto = false;
  bool overlap = true;          // false: all-reduce only after backward ends
  bool communicate = true;      // false: no gradient communication (a measurement aid)
  bool find_unused_parameters = false;
  CommHookKind comm_hook = CommHookKind::none;
  CommHookFactory custom_comm_hook;  // a hook of your own (runtime/strategy/comm_hook.h)
  PowerSgdOptions powersgd;          // comm_hook == powersgd (runtime/strategy/powersgd.h)
  // ddp: 1 shards the optimizer state across the ranks (ZeRO-1, docs/zero.md): gradients
  // reduce-scattered, each rank updates its shard, parameters all-gathered. 0: off.
  int zero_stage = 0;
  // Matrix-product precision of every replica (runtime/precision.h; docs/precision.md).
  // Gradients are reduced in bf16 with comm_hook = CommHookKind::bf16.
  Precision precision = Precision::fp32;
  // The loss, built once per replica (runtime/layers/loss.h; null: softmax cross-entropy),
  // and the evaluation metrics (runtime/layers/metric.h; null: {accuracy}).
  LossFactory loss;
  MetricsFactory metrics;
  // ddp: rank 0's buffers (BatchNorm's running statistics) broadcast to every rank after
  // each step's backward, so replicas stay identical (PyTorch's broadcast_buffers=True).
  bool broadcast_buffers = true;
  // dp and ddp: every BatchNorm computes its statistics over the global batch, all replicas
  // together (SyncBatchNorm; runtime/layers/batchnorm.h). Not with uneven_inputs join.
  bool sync_batchnorm = false;
  // ddp: ranks holding different numbers of batches (UnevenInputs, runtime/strategy/strategy.h).
  UnevenInputs uneven_inputs = UnevenInputs::off;
};

using ModelFactory = std::function<std::unique_ptr<Model>()>;

// Builds the strategy: calls make_model once per replica this process holds (each call
// must build the same model from the same seed). Throws std::invalid_argument for
// options that do not fit the mode (devices > 1 outside dp, a comm hook or zero_stage
// outside ddp, zero_stage other than 0 or 1, or with a comm hook).
std::unique_ptr<Strategy> parallelize(const ModelFactory& make_model, const OptimizerConfig& optimizer,
                                      const ParallelOptions& options, Tracer* tracer = nullptr);

// The process group ddp would create from the environment for these options: for a
// caller that needs the rank before building the strategy (a tracer per rank, logging on
// rank 0), then passes it as options.group.
std::shared_ptr<ProcessGroup> init_group(const ParallelOptions& options);

// Training batches for this process: under ddp its rank's share of each global batch
// (batch_size per replica), in dp and single the whole global batch (batch_size times
// the replicas), so every mode sees the same samples per step. Images in a seeded
// epoch order, short last batch dropped.
std::unique_ptr<BatchSource> training_batches(std::shared_ptr<const Dataset> dataset, int64_t batch_size,
                                              const Strategy& strategy, uint64_t seed);
// The same for text: random windows of `context` tokens (runtime/data/text.h).
std::unique_ptr<BatchSource> training_batches(std::shared_ptr<const TextDataset> text, int64_t context,
                                              int64_t batch_size, const Strategy& strategy, uint64_t seed);
// Every test sample in order, in batches of batch_size (every replica evaluates all).
std::unique_ptr<BatchSource> evaluation_batches(std::shared_ptr<const Dataset> dataset, int64_t batch_size = 256);

}  // namespace tandem
