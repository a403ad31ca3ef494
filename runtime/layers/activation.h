// Elementwise activations, any input shape: ReLU (saves its output) and GELU, exact erf
// form as torch.nn.GELU() (saves its input).
// Invariant: each saves exactly the one tensor its backward reads and releases it there.
#pragma once

#include <string>

#include "runtime/module.h"

namespace tandem {

class ReLU final : public Module {
 public:
  std::string kind() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Tensor y_;  // saved output: dx = dy where y > 0
  Tensor y_cache_, dx_cache_;
};

class GELU final : public Module {
 public:
  std::string kind() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Tensor x_;  // saved input
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
