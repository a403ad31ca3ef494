// Single-process training step: the reference semantics of a step.
#include "runtime/strategy/single.h"

#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/timer.h"

namespace tandem {

std::unique_ptr<Loss> make_replica_loss(const LossFactory& make_loss, const LossContext& context) {
  if (!make_loss) return default_loss();
  std::unique_ptr<Loss> loss = make_loss(context);
  if (!loss) throw std::invalid_argument("the loss factory returned no loss");
  return loss;
}

SingleStrategy::SingleStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device,
                               const LossFactory& make_loss)
    : model_(std::move(model)), device_(device) {
  model_->to(device_);
  model_->flatten_gradients();  // zero_grad: one fill
  optimizer_ = make_optimizer(optim, model_->parameters());
  set_loss(make_loss);
}

void SingleStrategy::set_loss(const LossFactory& make_loss) { loss_ = make_replica_loss(make_loss, {nullptr, device_}); }

StepOutput accumulate_micro_batches(Model& model, Loss& loss, Device device, std::span<const Batch> micro_batches,
                                    PhaseTimes& times, bool zero_first,
                                    const std::function<void(bool last)>& before_each,
                                    std::span<const double> weights) {
  Stopwatch sw(kernels_for(device));
  if (zero_first) model.zero_grad();
  const float micro = static_cast<float>(micro_batches.size());
  StepOutput out;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    if (before_each) before_each(m + 1 == micro_batches.size());
    const Batch& batch = micro_batches[m];
    const std::vector<Tensor> outputs = model.forward_outputs(batch.inputs.on(device));
    const std::vector<Tensor> targets = batch.targets_on(device);
    LossSum sum = loss.forward(outputs, targets);
    const int64_t rows = sum.rows;
    out.add(std::move(sum));
    sw.lap(times, &PhaseTimes::forward_ms);
    const float scale = weights.empty() ? 1.0f / (static_cast<float>(rows) * micro)
                                        : static_cast<float>(weights[m] / static_cast<double>(rows));
    model.backward_outputs(loss.backward(scale));
    sw.lap(times, &PhaseTimes::backward_ms);
  }
  return out;
}

StepOutput SingleStrategy::forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) {
  if (micro_batches.empty()) return StepOutput::finished();
  return accumulate_micro_batches(*model_, *loss_, device_, micro_batches, times, begin_accumulation());
}

void SingleStrategy::step(float lr, PhaseTimes& times) {
  check_not_accumulating("step");
  Stopwatch sw(kernels_for(device_));
  optimizer_->step(lr);
  sw.lap(times, &PhaseTimes::optimizer_ms);
}

const char* uneven_inputs_str(UnevenInputs u) {
  switch (u) {
    case UnevenInputs::off: return "off";
    case UnevenInputs::join: return "join";
    case UnevenInputs::throw_on_early_termination: return "throw_on_early_termination";
  }
  return "?";
}

EvalResult SingleStrategy::evaluate(BatchSource& loader) {
  return evaluate_model(*model_, loader, device_, *loss_, make_metrics());
}

EvalResult evaluate_model(Model& model, BatchSource& loader, Device device, Loss& loss, Metrics metrics) {
  model.set_training(false);
  double loss_sum = 0;
  int64_t rows = 0;
  for (auto& m : metrics) m->reset();
  loader.set_epoch(0);
  try {
    while (std::optional<Batch> batch = loader.next()) {
      const std::vector<Tensor> outputs = model.forward_outputs(batch->inputs.on(device));
      const std::vector<Tensor> targets = batch->targets_on(device);
      LossSum sum = loss.forward(outputs, targets);
      // One wait for the device per batch: a metric's read-back, behind which the loss's sum
      // has already landed.
      for (auto& m : metrics) m->add(outputs, targets);
      loss_sum += sum.sum->get();
      rows += sum.rows;
    }
  } catch (...) {
    model.set_training(true);
    throw;
  }
  model.set_training(true);
  EvalResult r;
  r.samples = rows;
  if (rows > 0) r.loss = loss_sum / static_cast<double>(rows);
  for (const auto& m : metrics) r.metrics.emplace_back(m->name(), m->value());
  return r;
}

}  // namespace tandem
