// CheckpointMeta: everything in a checkpoint's meta.json (docs/checkpoints.md shows one).
// Invariant: (seed, epoch, step_in_epoch) is the whole data-order state. The sampler's
// order is a pure function of (seed, epoch) (runtime/data/sampler.h) and parameter
// initialisation of (seed, name), so there is no RNG stream to save: a resumed run seeks
// its loader to the saved position and draws exactly the batches the interrupted run
// would have drawn. meta.json carries its own CRC-32 ("meta_crc32", over the canonical
// dump of every other field), so a flipped byte in it is caught like one in the tensors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tandem/runtime/checkpoint/file_io.h"
#include "tandem/runtime/data/loader.h"
#include "tandem/runtime/optim/optimizer.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// 1: the first format. A reader refuses a newer version rather than guessing.
inline constexpr int kCheckpointFormatVersion = 1;

// LrSchedule's arguments (runtime/optim/optimizer.h): informational, and a resumed run can
// warn when its own schedule differs.
struct LrScheduleInfo {
  std::string kind = "warmup_cosine";
  double base_lr = 0, min_lr = 0;
  int64_t warmup_steps = 0, total_steps = 0;
};

// One safetensors file as save_checkpoint wrote it.
struct CheckpointFileRecord {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;                            // of the whole file
  std::map<std::string, uint32_t> tensor_crc32;  // of each tensor's data bytes
};

struct CheckpointMeta {
  // Progress: `step` optimizer steps are done, and the loader's next batch is
  // (epoch, step_in_epoch), counted in the writer's loader batches (micro-batches of
  // batch_size per replica: step_in_epoch = steps this epoch x grad_accum).
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  uint64_t seed = 0;

  // Data: what it takes to convert the position to another world size or batch size.
  std::string dataset;     // "fashion-mnist", "synthetic", ...
  int64_t batch_size = 0;  // per replica and micro-batch; 0: not recorded
  int64_t replicas = 1;    // DP devices or DDP ranks (1 for single)
  int64_t grad_accum = 1;

  // Model: how to rebuild it (zoo/zoo.h's ModelConfig; the runtime does not know the zoo).
  std::string model_name;
  int64_t hidden = 0;
  Shape input_shape;  // (C, H, W)
  int64_t classes = 0;

  // Optimizer: save_checkpoint fills these from the Optimizer it saves.
  OptimizerConfig optimizer;
  int64_t optimizer_steps = 0;  // Optimizer::steps_taken()
  std::optional<LrScheduleInfo> lr_schedule;

  // Who wrote it (informational: a checkpoint loads in every mode and world size).
  std::string mode = "single";
  int64_t world_size = 1;
  std::map<std::string, std::string> extra;  // free-form notes of the caller

  // Filled by save_checkpoint; read back from meta.json.
  int format_version = kCheckpointFormatVersion;
  int64_t parameters = 0;      // element count
  std::string param_checksum;  // parameter_checksum(model) at save: checked after a load
  std::string created_utc;     // "2024-05-01T12:00:00Z"
  std::map<std::string, CheckpointFileRecord> files;  // "model.safetensors", "optimizer.safetensors"

  LoaderPosition position() const { return {epoch, step_in_epoch}; }
  // Training samples of `epoch` consumed by every replica together (0 when batch_size is unknown).
  int64_t samples_in_epoch() const { return step_in_epoch * batch_size * replicas; }
  // The loader position of a run with `batch_size` per replica and `replicas` replicas: the
  // same samples consumed. Throws CheckpointError when they are not a whole number of that
  // run's micro-batches (then the exact data order cannot continue: resume with a global
  // micro-batch that divides samples_in_epoch(), or seek to the next epoch yourself).
  LoaderPosition position_for(int64_t batch_size, int64_t replicas) const;
};

// meta.json's text (2-space indented JSON, sorted keys, "meta_crc32" included).
std::string checkpoint_meta_to_json(const CheckpointMeta& meta);
// Parses meta.json's text; `path` names the file in errors. Throws CheckpointError on
// invalid JSON, a missing or mistyped field, a meta_crc32 mismatch or a newer format.
CheckpointMeta checkpoint_meta_from_json(const std::string& text, const std::string& path);

}  // namespace tandem
