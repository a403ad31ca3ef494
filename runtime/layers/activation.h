// Elementwise activations, any input shape: ReLU (saves its output) and GELU (saves its
// input), exact erf form as torch.nn.GELU() or GPT-2's tanh approximation as
// torch.nn.GELU(approximate="tanh").
// Invariant: each saves exactly the one tensor its backward reads and releases it there.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class ReLU final : public Module {
 public:
  std::string kind() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  Tensor y_;  // saved output: dx = dy where y > 0
  Tensor y_cache_, dx_cache_;
};

enum class GeluApproximation : uint8_t { none, tanh };

class GELU final : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::none) : approximation_(approximation) {}
  std::string kind() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  GeluApproximation approximation_;
  Tensor x_;  // saved input
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
