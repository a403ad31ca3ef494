// Linear: y = x W^T + b, as torch.nn.Linear (weight (out, in), PyTorch's default init).
// Invariant: forward keeps only its input for backward, and backward consumes it
// (so the previous layer's output buffer becomes reusable); parameter gradients are
// added into Parameter::grad, never assigned.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  std::string kind() const override { return "Linear"; }
  // x (..., in) -> y (..., out); every leading dimension is a batch dimension.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;
  // weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)), PyTorch's kaiming_uniform(a=sqrt(5)) bound.
  void reset_parameters(uint64_t seed) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Parameter* weight_;          // (out, in)
  Parameter* bias_ = nullptr;  // (out), absent when bias = false
  Tensor x_;                   // (rows, in) saved by forward, released by backward (bf16 under bf16)
  Tensor w16_, x16_, dy16_;    // bf16 operands under Precision::bf16 (runtime/layers/autocast.h)
  Tensor y_cache_, dx_cache_;  // reused across steps when nobody else holds them
};

}  // namespace tandem
