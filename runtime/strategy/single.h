// Single: one process, one device, the reference every other mode must match.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/strategy/strategy.h"

namespace tandem {

class SingleStrategy final : public Strategy {
 public:
  SingleStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device,
                 const LossFactory& make_loss = {});
  const char* mode() const override { return "single"; }
  int replicas() const override { return 1; }
  using Strategy::forward_backward;  // the overloads without phase times
  using Strategy::step;
  StepOutput forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) override;
  void step(float lr, PhaseTimes& times) override;
  EvalResult evaluate(BatchSource& loader) override;
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *optimizer_; }
  void set_loss(const LossFactory& make_loss) override;

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  Device device_;
};

// One replica's loss from a factory (null: default_loss()); throws when the factory gives none.
std::unique_ptr<Loss> make_replica_loss(const LossFactory& make_loss, const LossContext& context);

// Forward, loss and backward of each micro-batch on `device`, the model's gradients
// zeroed first when `zero_first` and then accumulated (each micro-batch carries 1/K of the
// mean loss: its gradient is scaled by 1 / (its rows * K)). `before_each(last)` runs before
// each micro-batch (DDP attaches its reducer to the last). Returns the mean loss over the
// micro-batches, read later.
// `weights`, when given, replaces 1/K: micro-batch m's gradient is scaled by
// weights[m] / (its rows) (DDP's uneven inputs weight each rank by its share of samples).
StepOutput accumulate_micro_batches(Model& model, Loss& loss, Device device, std::span<const Batch> micro_batches,
                                    PhaseTimes& times, bool zero_first = true,
                                    const std::function<void(bool last)>& before_each = {},
                                    std::span<const double> weights = {});

// Shared by every strategy: the loss's mean over rows and each metric of `model` on a
// loader's batches, on `device`.
EvalResult evaluate_model(Model& model, BatchSource& loader, Device device, Loss& loss, Metrics metrics);

}  // namespace tandem
