// LayerNorm: normalises over the last dimension, then scales and shifts, as
// torch.nn.LayerNorm(features, eps) (biased variance, elementwise affine).
// Invariant: forward saves the input and the per-row mean and 1/std, exactly what
// backward needs; gamma/beta gradients are added into Parameter::grad.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class LayerNorm final : public Module {
 public:
  explicit LayerNorm(int64_t features, float eps = 1e-5f);
  std::string kind() const override { return "LayerNorm"; }
  // x (..., features) -> y of the same shape.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;
  // weight = 1, bias = 0 (the seed is unused, as in PyTorch).
  void reset_parameters(uint64_t seed) override;

 private:
  int64_t features_;
  float eps_;
  Parameter* weight_;   // gamma (features)
  Parameter* bias_;     // beta (features)
  Tensor x_;            // saved input
  Tensor mean_, rstd_;  // (rows) layer-owned, reused across steps
  Tensor y_cache_, dx_cache_;
  Tensor frozen_grad_;  // (2 * features) scratch for a frozen gamma's or beta's gradient
};

}  // namespace tandem
