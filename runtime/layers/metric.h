// Metric: the evaluation seam. A strategy's evaluate() runs the model over a loader and
// hands each batch's outputs and targets (on the model's device) to every metric, then
// reads value(). Metrics accumulate over batches as exact sums (counts, sums in double)
// and divide once at the end, so the value does not depend on the batch size.
//
// Built in: Accuracy (argmax of output 0 against i32 class indices), here; MeanSquaredErrorMetric
// and BinaryAccuracy (runtime/layers/regression_loss.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/runtime/tensor.h"

namespace tandem {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;  // the key in EvalResult and summary.json
  virtual void reset() = 0;
  // One batch (Loss::forward's spans). Throws std::invalid_argument naming what does not fit.
  virtual void add(std::span<const Tensor> outputs, std::span<const Tensor> targets) = 0;
  virtual double value() const = 0;  // over every row added since reset(); 0 before any
};

// Fraction of rows whose argmax (first maximum on ties) of output 0 (N, C) equals target 0 (N) i32.
class Accuracy final : public Metric {
 public:
  std::string name() const override { return "accuracy"; }
  void reset() override { correct_ = rows_ = 0; }
  void add(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  double value() const override {
    return rows_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(rows_);
  }

 private:
  int64_t correct_ = 0, rows_ = 0;
};

using Metrics = std::vector<std::unique_ptr<Metric>>;
// The metrics a strategy uses when none are given: {Accuracy}.
Metrics default_metrics();

}  // namespace tandem
