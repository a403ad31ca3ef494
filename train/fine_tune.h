// tandem-train's model factory for fine-tuning: the zoo's model (zoo/zoo.h), then the
// --init-from checkpoint's weights (load_weights, runtime/checkpoint/checkpoint.h, minus
// --init-skip's patterns), then --freeze's patterns frozen (runtime/freeze.h). It is what
// parallelize() calls, so the strategies see the frozen set when they build their reducer
// and optimizer, the supported order. Without those flags it is build_model itself.
// Invariant: a mismatched checkpoint, a pattern matching no parameter, or freezing every
// parameter is a UsageError (exit 2) whose message names the flag and every tensor or
// pattern concerned; nothing is trained from a half-loaded model.
#pragma once

#include "train/train_config.h"
#include "zoo/zoo.h"
#include "runtime/strategy/parallel.h"

namespace tandem {

// The factory to give parallelize(); it logs what it loaded and froze on its first call
// only (DataParallel calls it once per replica).
ModelFactory fine_tune_model_factory(const ModelConfig& model, const TrainConfig& c);

}  // namespace tandem
