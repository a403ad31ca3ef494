// CausalSelfAttention forward/backward: qkv -> attention kernel -> proj (-> dropout).
#include "runtime/layers/attention.h"

#include <stdexcept>

#include "runtime/batched_attention.h"
#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

// Under bf16 every device runs the batched composition with bf16 products (the CPU's fused
// kernel is f32 only), on scratch that lives for the call (on a GPU: back to the caching
// allocator at once, as the device's own attention scratch).
Tensor attention_scratch(int64_t b, int64_t t, int64_t c, int64_t nh, bool backward, Device device) {
  return Tensor::empty({static_cast<int64_t>(batched_attention_scratch(b, t, c, nh, backward, Precision::bf16))},
                       DType::f32, device);
}

}  // namespace

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::tiled ? "tiled" : "materialized";
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "materialized") return AttentionKernel::materialized;
  if (name == "tiled") return AttentionKernel::tiled;
  throw std::invalid_argument("attention kernel: expected materialized or tiled, got '" + name + "'");
}

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, float dropout, uint64_t dropout_seed,
                                         AttentionKernel kernel)
    : n_embd_(n_embd), n_head_(n_head), kernel_(kernel) {
  if (n_embd <= 0 || n_head <= 0 || n_embd % n_head != 0)
    throw std::invalid_argument("CausalSelfAttention: n_embd (" + std::to_string(n_embd) +
                                ") must be a positive multiple of n_head (" + std::to_string(n_head) + ")");
  qkv_ = &add_module("qkv", std::make_unique<Linear>(n_embd, 3 * n_embd));
  proj_ = &add_module("proj", std::make_unique<Linear>(n_embd, n_embd));
  if (dropout > 0.f) drop_ = &add_module("drop", std::make_unique<Dropout>(dropout, dropout_seed));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  if (x.ndim() != 3 || x.dim(2) != n_embd_)
    throw_shape_error(kind(), "input", "(B, T, " + std::to_string(n_embd_) + ")", x.shape());
  const int64_t b = x.dim(0), t = x.dim(1);
  Tensor qkv = qkv_->forward(x);
  Tensor out = reuse_buffer(out_cache_, {b, t, n_embd_}, device_);
  Kernels& k = kernels_for(device_);
  // Evaluation keeps nothing for a backward.
  if (kernel_ == AttentionKernel::tiled) {
    Tensor lse = reuse_buffer(lse_cache_, {b, n_head_, t}, device_);
    k.attention_forward_tiled(out.f32(), lse.f32(), qkv.f32(), b, t, n_embd_, n_head_);
    if (training_) qkv_out_ = qkv, out_ = out, lse_ = lse;
  } else {
    Tensor att = reuse_buffer(att_cache_, {b, n_head_, t, t}, device_);
    if (precision() == Precision::bf16) {
      Tensor scratch = attention_scratch(b, t, n_embd_, n_head_, false, device_);
      batched_attention_forward(k, out.f32(), att.f32(), qkv.f32(), scratch.f32(), b, t, n_embd_, n_head_,
                                Precision::bf16);
    } else {
      k.attention_forward(out.f32(), att.f32(), qkv.f32(), b, t, n_embd_, n_head_);
    }
    if (training_) qkv_out_ = qkv, att_ = att;
  }
  Tensor y = proj_->forward(out);
  return drop_ ? drop_->forward(y) : y;
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  check_saved(kind(), qkv_out_.defined());
  const int64_t b = qkv_out_.dim(0), t = qkv_out_.dim(1);
  Tensor g = drop_ ? backward_child(*drop_, dy) : dy;
  Tensor dout = backward_child(*proj_, g);
  Tensor dqkv = reuse_buffer(dqkv_cache_, qkv_out_.shape(), device_);
  Kernels& k = kernels_for(device_);
  if (kernel_ == AttentionKernel::tiled) {
    k.attention_backward_tiled(dqkv.f32(), dout.f32(), qkv_out_.f32(), out_.f32(), lse_.f32(), b, t, n_embd_,
                               n_head_);
  } else {
    Tensor datt = reuse_buffer(datt_cache_, att_.shape(), device_);
    if (precision() == Precision::bf16) {
      Tensor scratch = attention_scratch(b, t, n_embd_, n_head_, true, device_);
      batched_attention_backward(k, dqkv.f32(), datt.f32(), dout.f32(), qkv_out_.f32(), att_.f32(), scratch.f32(),
                                 b, t, n_embd_, n_head_, Precision::bf16);
    } else {
      k.attention_backward(dqkv.f32(), datt.f32(), dout.f32(), qkv_out_.f32(), att_.f32(), b, t, n_embd_, n_head_);
    }
  }
  qkv_out_ = Tensor();
  att_ = Tensor();
  out_ = Tensor();
  lse_ = Tensor();
  return backward_child(*qkv_, dqkv);
}

void CausalSelfAttention::release_activations() {
  qkv_out_ = Tensor();
  att_ = Tensor();
  out_ = Tensor();
  lse_ = Tensor();
  att_cache_ = Tensor();
  out_cache_ = Tensor();
  lse_cache_ = Tensor();
  dqkv_cache_ = Tensor();
  datt_cache_ = Tensor();
  Module::release_activations();  // qkv, proj, drop
}

}  // namespace tandem
