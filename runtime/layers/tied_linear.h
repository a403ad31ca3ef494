// TiedLinear: y = x W^T with a weight another module owns, as GPT-2's LM head reads the
// token embedding (logits = x wte^T). It owns no parameter, so the container never
// reports the weight ready after this layer: the owner (the Embedding, whose backward
// runs last) reports it once both uses have added their gradient (runtime/module.h).
// Invariant: forward flattens every leading dimension into rows, so logits are the
// (rows, out) matrix a row-wise loss expects.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class TiedLinear final : public Module {
 public:
  // `weight` (out, in) must outlive this layer; it is read on every call (it may be
  // moved between devices or have its gradient rebound in between).
  explicit TiedLinear(Parameter& weight);
  std::string kind() const override { return "TiedLinear"; }
  // x (..., in) -> y (rows, out), rows = product of the leading dimensions.
  Tensor forward(const Tensor& x) override;
  // Adds dy^T x into the tied weight's gradient; returns dx of x's shape.
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  Parameter& weight_;
  Tensor x_;  // bf16 under Precision::bf16
  Tensor y_cache_, dx_cache_;
  Tensor w16_, x16_, dy16_;  // bf16 operands (runtime/layers/autocast.h)
};

}  // namespace tandem
