// Regression losses and their metrics: mean squared error and binary cross-entropy on
// logits (runtime/layers/loss.h's seam), each over output 0 and target 0 of one shape
// (N, ...). A row is one sample: its loss is the mean over the sample's elements, so
// sum / rows is torch.nn.MSELoss() or torch.nn.BCEWithLogitsLoss() with mean reduction on
// the same tensors, and an uneven split of the batch still adds up exactly (loss.h).
// Invariant: forward copies the output into a buffer of its own, so that the model's
// output buffer is free again for its next forward (layer_util.h's reuse_buffer: no
// allocation per step once warm, in training and in evaluation, which never calls
// backward); the target is the batch's and is only read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/layers/metric.h"

namespace tandem {

// What both regression losses keep between forward and backward.
struct RegressionLossState {
  bool saved = false;
  Tensor pred;    // (N, ...) copy of output 0, owned here and reused across steps
  Tensor target;  // (N, ...) the batch's target 0
  Tensor losses;  // (N) per-row scratch
  Tensor grad_cache;
  Tensor grads[1];
};

// (pred - target)^2, as torch.nn.MSELoss: output 0 and target 0 f32 of one shape (N, ...).
class MeanSquaredError final : public Loss {
 public:
  std::string name() const override { return "mse"; }
  LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  // dpred (N, ...) = scale * 2 * (pred - target) / (elements per row).
  std::span<const Tensor> backward(float scale) override;

 private:
  RegressionLossState state_;
};

// max(x, 0) - x*t + log1p(exp(-|x|)), as torch.nn.BCEWithLogitsLoss: output 0 holds logits
// x and target 0 probabilities t in [0, 1] (not checked, as torch), f32 of one shape (N, ...).
class BceWithLogits final : public Loss {
 public:
  std::string name() const override { return "bce_with_logits"; }
  LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  // dx (N, ...) = scale * (sigmoid(x) - t) / (elements per row).
  std::span<const Tensor> backward(float scale) override;

 private:
  RegressionLossState state_;
};

// Mean of (output 0 - target 0)^2 over every element added: the row means (the loss's
// kernel) times the row length, summed in double.
class MeanSquaredErrorMetric final : public Metric {
 public:
  std::string name() const override { return "mse"; }
  void reset() override {
    sum_sq_ = 0;
    elements_ = 0;
  }
  void add(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  double value() const override { return elements_ == 0 ? 0.0 : sum_sq_ / static_cast<double>(elements_); }

 private:
  double sum_sq_ = 0;
  int64_t elements_ = 0;
  Tensor losses_;  // (N) per-row scratch on the outputs' device
};

// Fraction of elements whose prediction (logit > 0) agrees with the target's class
// (target > 0.5). Reads each batch back to the host into buffers it reuses.
class BinaryAccuracy final : public Metric {
 public:
  std::string name() const override { return "binary_accuracy"; }
  void reset() override { correct_ = elements_ = 0; }
  void add(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  double value() const override {
    return elements_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(elements_);
  }

 private:
  int64_t correct_ = 0, elements_ = 0;
  std::vector<float> logits_, targets_;  // host copies of a device batch
};

}  // namespace tandem
