// GPT-2's pre-LayerNorm transformer block and its MLP, as modules made of sub-modules:
//   Mlp:               fc (C -> 4C) -> GELU (tanh) -> proj (4C -> C) [-> drop]
//   TransformerBlock:  x = x + attn(ln1(x)); x = x + mlp(ln2(x))
// Parameter names follow nanoGPT's habits under the container's prefix:
// blocks.0.ln1.weight, blocks.0.attn.qkv.weight, blocks.0.mlp.proj.bias, ...
// Invariant: each sub-module's parameters are reported ready as soon as its own
// backward returns (Module::backward_child), so the reducer sees the block's last
// sub-module's gradients before the block's attention has run its backward.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/layers/activation.h"
#include "tandem/runtime/layers/attention.h"
#include "tandem/runtime/layers/dropout.h"
#include "tandem/runtime/layers/layernorm.h"
#include "tandem/runtime/layers/linear.h"
#include "tandem/runtime/module.h"

namespace tandem {

// Mlp keeps nothing of its own: Module::release_activations releases its sub-modules.
class Mlp final : public Module {
 public:
  Mlp(int64_t n_embd, float dropout = 0.f, uint64_t dropout_seed = 0);
  std::string kind() const override { return "Mlp"; }
  // x (..., C) -> (..., C)
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Linear* fc_;
  GELU* gelu_;
  Linear* proj_;
  Dropout* drop_ = nullptr;
};

class TransformerBlock final : public Module {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, float dropout = 0.f, uint64_t dropout_seed = 0,
                   AttentionKernel attention = AttentionKernel::materialized);
  std::string kind() const override { return "TransformerBlock"; }
  // x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  LayerNorm* ln1_;
  CausalSelfAttention* attn_;
  LayerNorm* ln2_;
  Mlp* mlp_;
  bool saved_ = false;
};

}  // namespace tandem
