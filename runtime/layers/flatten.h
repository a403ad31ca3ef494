// Flatten: (N, d1, d2, ...) -> (N, d1*d2*...), as torch.nn.Flatten() (start_dim 1).
// Invariant: both directions are reshapes that share storage; nothing is copied.
#pragma once

#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class Flatten final : public Module {
 public:
  std::string kind() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  bool saved_ = false;
  Shape x_shape_, y_shape_;
};

}  // namespace tandem
