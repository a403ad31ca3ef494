// Checkpoints (docs/reference.md, "Checkpoints"; docs/checkpoints.md): one directory per
// checkpoint under a root,
//   ROOT/step-00001234/model.safetensors      parameters and buffers, keyed by name ("fc1.weight",
//                                             "bn1.running_mean": a PyTorch state dict's names)
//                      optimizer.safetensors  optimizer state ("fc1.weight.momentum_buffer"),
//                                             steps_taken in its __metadata__
//                      comm_hook.safetensors  a stateful comm hook's state (PowerSGD: error
//                                             feedback of every rank, warm-start Qs), when
//                                             the run has one
//                      meta.json              CheckpointMeta, file and tensor CRC-32s
// Names carry no mode prefix, so a checkpoint written in any mode and world size loads in
// any other.
//
// Invariants:
//  - Atomic: a checkpoint is written into ROOT/.tmp-step-XXXXXXXX-<pid>/, every file and the
//    directory fsynced, then renamed to ROOT/step-XXXXXXXX and ROOT fsynced. A crash at any
//    point leaves either the complete new checkpoint or none, and the previous ones intact;
//    names starting with '.' are never listed or resumed from.
//  - Streaming: tensors go from their own memory (or a 4 MiB staging chunk for device
//    tensors) to the file and back, so saving or loading never holds a second model copy.
//  - Load validates everything (checksums, then every tensor's name, dtype and shape against
//    the model and optimizer) before it writes a single byte into them.
//  - Nothing here calls exit(): errors are CheckpointError naming the path and tensor.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tandem/runtime/checkpoint/checkpoint_meta.h"
#include "tandem/runtime/checkpoint/file_io.h"
#include "tandem/runtime/checkpoint/safetensors.h"
#include "tandem/runtime/model.h"
#include "tandem/runtime/optim/optimizer.h"

namespace tandem {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kMetaFile = "meta.json";
inline constexpr const char* kCommHookFile = "comm_hook.safetensors";

// "step-00001234" (at least 8 digits; listing orders by the number, not the text).
std::string checkpoint_dir_name(int64_t step);
// The step of a "step-N" directory name; nullopt for any other name (".tmp-...", "latest").
std::optional<int64_t> parse_checkpoint_step(const std::string& name);

// Writes ROOT/step-<meta.step> from the model's parameters and the optimizer's state, then
// keeps the newest `keep_last` checkpoints of steps <= meta.step (keep_last <= 0: all),
// deleting the others only once the new one is durable. `meta` describes the run (step,
// loader position, seed, model and data config); save fills the optimizer fields, the
// parameter checksum, the time and the file records itself. A checkpoint of the same step
// already there is replaced atomically. Call it on one process only (rank 0 / device 0).
// Returns the checkpoint's path.
// `comm_hook` (non-null, non-empty): written as comm_hook.safetensors, recorded and
// verified like the others; load_checkpoint leaves it to the caller (the strategy's hook).
std::string save_checkpoint(const std::string& root, const Model& model, const Optimizer& optimizer,
                            const CheckpointMeta& meta, int keep_last = 0, const TensorFile* comm_hook = nullptr);

// What model.safetensors holds: every parameter, then every buffer, by name (views of
// the model's own tensors).
NamedTensors model_tensors(const Model& model);

// ROOT/step-N directories, highest step first. A missing root gives none.
std::vector<std::string> list_checkpoints(const std::string& root);

struct VerifyResult {
  std::vector<std::string> problems;   // each names the file (and tensor) concerned
  std::optional<CheckpointMeta> meta;  // when meta.json could be read
  bool ok() const { return problems.empty(); }
  std::string summary() const;  // problems joined with "; ", or "ok"
};

// Checks one checkpoint directory completely: every file present, meta.json valid and
// self-consistent, each safetensors header valid, file sizes and every file and tensor
// checksum as recorded. Reads every byte (in 4 MiB chunks). Never throws.
VerifyResult verify_checkpoint(const std::string& dir);

// meta.json of a checkpoint directory, parsed and checked against its own CRC.
CheckpointMeta read_checkpoint_meta(const std::string& dir);

// The checkpoint a run should resume from ("" = start from scratch):
//   ""      no resume;
//   "auto"  the newest checkpoint under checkpoint_dir that verifies; each newer one that
//           does not is reported (spdlog::warn, naming it and why) and skipped; none at all
//           (or no checkpoint_dir on disk yet) means a fresh start;
//   PATH    that checkpoint directory (or checkpoint_dir/PATH); throws CheckpointError if it
//           does not verify.
// Throws std::invalid_argument for "auto" without a checkpoint_dir.
std::string resolve_resume(const std::string& spec, const std::string& checkpoint_dir);

// Loads a checkpoint into `model` (and `optimizer` with its steps_taken, unless null) on
// whatever device they live. Refuses, before modifying anything, a checkpoint that does not
// verify (naming the file) or whose tensors differ from the model's or optimizer's (naming
// the first differing tensor: missing, extra, dtype or shape) or whose optimizer kind
// differs. Returns the checkpoint's meta: the caller restores its step, loader position
// (meta.position_for) and LR schedule position from it.
//
// Frozen parameters (runtime/freeze.h) have no optimizer state, so a checkpoint written
// with some frozen resumes into a run that freezes the same ones. Resuming with a different
// frozen set is refused, naming every parameter concerned: optimizer state in the
// checkpoint for a parameter this optimizer does not update (frozen now, trained then), or
// none for one it does (trained now, frozen then). Resuming promises to continue the same
// run; a fine-tune that changes what trains starts from the weights only (load_weights,
// tandem-train --init-from) with a fresh optimizer.
CheckpointMeta load_checkpoint(const std::string& dir, Model& model, Optimizer* optimizer);

// Model weights only, from another run, into a model that may differ from it (fine-tuning;
// PyTorch's load_state_dict, strict about everything not skipped). `path` is a checkpoint
// directory (it must verify), a directory of step-N checkpoints (the newest that verifies),
// or a .safetensors file. Tensors are matched by name. Unless every parameter of the model
// is in the file with the same dtype and shape, and every tensor of the file is a
// parameter of the model, nothing is loaded and WeightsMismatch lists every missing,
// unexpected and reshaped tensor by name with its shapes. `skip_patterns` (globs,
// runtime/freeze.h's glob_match) name tensors that are neither loaded nor checked: a
// model's parameter keeps its fresh initialisation (a new head), a file's tensor is
// ignored. The optimizer state, step and counters of the checkpoint are not read. Other
// failures: std::invalid_argument when nothing at `path` is a checkpoint, CheckpointError
// when it does not verify or cannot be read.
struct LoadWeightsResult {
  std::string source;                // the .safetensors file read
  std::vector<std::string> loaded;   // parameters now holding the file's values, in registration order
  std::vector<std::string> skipped;  // parameters matched by a skip pattern: initialisation kept
  std::vector<std::string> ignored;  // tensors of the file matched by a skip pattern and not loaded
};
struct WeightsMismatch : std::invalid_argument {
  WeightsMismatch(const std::string& message, std::vector<std::string> missing, std::vector<std::string> unexpected,
                  std::vector<std::string> reshaped)
      : std::invalid_argument(message), missing(std::move(missing)), unexpected(std::move(unexpected)),
        reshaped(std::move(reshaped)) {}
  std::vector<std::string> missing;     // model parameters the file lacks
  std::vector<std::string> unexpected;  // file tensors the model lacks
  std::vector<std::string> reshaped;    // in both, with another dtype or shape
};
LoadWeightsResult load_weights(const std::string& path, Model& model, const std::vector<std::string>& skip_patterns = {});

}  // namespace tandem
