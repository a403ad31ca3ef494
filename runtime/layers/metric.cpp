// The built-in metric: accuracy of an (N, C) classifier against i32 class indices.
#include "runtime/layers/metric.h"

#include <stdexcept>
#include <string>

#include "runtime/layers/loss.h"

namespace tandem {

void Accuracy::add(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  if (outputs.empty() || targets.empty())
    throw std::invalid_argument("Accuracy: needs output 0 (N, C) logits and target 0 (N) class indices, got " +
                                std::to_string(outputs.size()) + " outputs and " + std::to_string(targets.size()) +
                                " targets");
  correct_ += SoftmaxCrossEntropy::count_correct(outputs[0], targets[0]);
  rows_ += outputs[0].dim(0);
}

Metrics default_metrics() {
  Metrics m;
  m.push_back(std::make_unique<Accuracy>());
  return m;
}

}  // namespace tandem
