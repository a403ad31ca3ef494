// Single: one process, one device, the reference every other mode must match.
#pragma once

#include <memory>

#include "runtime/layers/loss.h"
#include "runtime/strategy/strategy.h"

namespace tandem {

class SingleStrategy final : public Strategy {
 public:
  SingleStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device);
  const char* mode() const override { return "single"; }
  int replicas() const override { return 1; }
  StepOutput forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) override;
  void step(float lr, PhaseTimes& times) override;
  EvalResult evaluate(DataLoader& loader) override;
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *optimizer_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  SoftmaxCrossEntropy loss_;
  Device device_;
};

// Shared by every strategy: mean loss and correct count of `model` on a loader's
// batches, on `device`.
EvalResult evaluate_model(Model& model, DataLoader& loader, Device device);

}  // namespace tandem
