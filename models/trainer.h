// The training loop, the same in every mode: batch -> strategy.forward_backward ->
// strategy.step -> log; evaluation at the end of each epoch, every --eval-every steps
// and at the end of the run; the summary at exit.
#pragma once

#include "models/train_config.h"

namespace tandem {

// Runs the whole job described by `config`. Throws on failure (main maps to exit 1).
void run_training(const TrainConfig& config);

}  // namespace tandem
