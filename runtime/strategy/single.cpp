// Single-process training step: the reference semantics of a step.
#include "runtime/strategy/single.h"

#include "runtime/kernels.h"
#include "runtime/timer.h"

namespace tandem {

SingleStrategy::SingleStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device)
    : model_(std::move(model)), device_(device) {
  model_->to(device_);
  optimizer_ = make_optimizer(optim, model_->parameters());
}

StepOutput accumulate_micro_batches(Model& model, SoftmaxCrossEntropy& loss, Device device,
                                    std::span<const Batch> micro_batches, PhaseTimes& times,
                                    const std::function<void(bool last)>& before_each) {
  Stopwatch sw(kernels_for(device));
  model.zero_grad();
  const float micro = static_cast<float>(micro_batches.size());
  StepOutput out;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    if (before_each) before_each(m + 1 == micro_batches.size());
    const Batch& batch = micro_batches[m];
    Tensor logits = model.forward(batch.inputs.on(device));
    const int64_t rows = logits.dim(0);
    out.add(loss.forward_later(logits, batch.labels.on(device)), rows);
    sw.lap(times, &PhaseTimes::forward_ms);
    model.backward(loss.backward(1.0f / (static_cast<float>(rows) * micro)));
    sw.lap(times, &PhaseTimes::backward_ms);
  }
  return out;
}

StepOutput SingleStrategy::forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) {
  return accumulate_micro_batches(*model_, loss_, device_, micro_batches, times);
}

void SingleStrategy::step(float lr, PhaseTimes& times) {
  Stopwatch sw(kernels_for(device_));
  optimizer_->step(lr);
  sw.lap(times, &PhaseTimes::optimizer_ms);
}

EvalResult SingleStrategy::evaluate(BatchSource& loader) { return evaluate_model(*model_, loader, device_); }

EvalResult evaluate_model(Model& model, BatchSource& loader, Device device) {
  model.set_training(false);
  SoftmaxCrossEntropy loss;
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  loader.set_epoch(0);
  while (std::optional<Batch> batch = loader.next()) {
    Tensor x = batch->inputs.on(device);
    Tensor y = batch->labels.on(device);
    Tensor logits = model.forward(x);
    // One wait for the device per batch: count_correct's read-back, behind which the
    // loss's sum has already landed.
    std::shared_ptr<Kernels::PendingValue> batch_loss = loss.forward_later(logits, y);
    correct += loss.count_correct(logits, y);
    loss_sum += batch_loss->get();
    samples += logits.dim(0);
  }
  model.set_training(true);
  EvalResult r;
  r.samples = samples;
  if (samples > 0) {
    r.loss = loss_sum / static_cast<double>(samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  }
  return r;
}

}  // namespace tandem
