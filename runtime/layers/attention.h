// CausalSelfAttention: GPT-2's multi-head self-attention. One fused projection makes
// q, k and v (sub-module "qkv", C -> 3C), the attention kernel masks the future and
// mixes v per head (runtime/kernels.h, attention_forward), and "proj" (C -> C) maps the
// concatenated heads back; "drop" (only when p > 0) is the residual dropout after it.
// Attention probabilities themselves are not dropped out.
// Invariant: forward keeps the qkv activations and the softmax probabilities, exactly
// what the attention backward reads; backward releases them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/runtime/layers/dropout.h"
#include "tandem/runtime/layers/linear.h"
#include "tandem/runtime/module.h"

namespace tandem {

class CausalSelfAttention final : public Module {
 public:
  // n_embd must divide by n_head. dropout_seed seeds the residual dropout's masks.
  CausalSelfAttention(int64_t n_embd, int64_t n_head, float dropout = 0.f, uint64_t dropout_seed = 0);
  std::string kind() const override { return "CausalSelfAttention"; }
  // x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }

 private:
  int64_t n_embd_, n_head_;
  Linear* qkv_;
  Linear* proj_;
  Dropout* drop_ = nullptr;
  Tensor qkv_out_, att_;  // (B, T, 3C) and (B, NH, T, T), saved by forward
  Tensor att_cache_, out_cache_, dqkv_cache_, datt_cache_;
};

}  // namespace tandem
