// CausalSelfAttention: GPT-2's multi-head self-attention. One fused projection makes
// q, k and v (sub-module "qkv", C -> 3C), the attention kernel masks the future and
// mixes v per head (runtime/kernels.h, attention_forward), and "proj" (C -> C) maps the
// concatenated heads back; "drop" (only when p > 0) is the residual dropout after it.
// Attention probabilities themselves are not dropped out.
// Invariant: forward keeps exactly what its kernel's backward reads (materialized: the qkv
// activations and the (B, NH, T, T) probabilities; tiled: qkv, the attention output and a
// (B, NH, T) log-sum-exp); backward releases them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/runtime/layers/dropout.h"
#include "tandem/runtime/layers/linear.h"
#include "tandem/runtime/module.h"

namespace tandem {

// How the attention between the two projections runs (--attention):
//   materialized  Kernels::attention_forward: the (B, NH, T, T) probabilities are kept for
//                 backward (and a score gradient of that size is made there); under
//                 --precision bf16 its products take bf16 operands.
//   tiled         Kernels::attention_forward_tiled, flash-style: query and key tiles with an
//                 online softmax, a (B, NH, T) log-sum-exp kept instead, the probabilities
//                 recomputed in backward. fp32 under either precision.
enum class AttentionKernel { materialized, tiled };
const char* attention_kernel_name(AttentionKernel kernel);
// Throws std::invalid_argument naming the accepted names.
AttentionKernel parse_attention_kernel(const std::string& name);

class CausalSelfAttention final : public Module {
 public:
  // n_embd must divide by n_head. dropout_seed seeds the residual dropout's masks.
  CausalSelfAttention(int64_t n_embd, int64_t n_head, float dropout = 0.f, uint64_t dropout_seed = 0,
                      AttentionKernel kernel = AttentionKernel::materialized);
  std::string kind() const override { return "CausalSelfAttention"; }
  // x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  AttentionKernel attention_kernel() const { return kernel_; }

 private:
  int64_t n_embd_, n_head_;
  AttentionKernel kernel_;
  Linear* qkv_;
  Linear* proj_;
  Dropout* drop_ = nullptr;
  // Saved by forward: qkv (B, T, 3C), and att (B, NH, T, T) materialized or out (B, T, C)
  // and lse (B, NH, T) tiled.
  Tensor qkv_out_, att_, out_, lse_;
  Tensor att_cache_, out_cache_, lse_cache_, dqkv_cache_, datt_cache_;
};

}  // namespace tandem
