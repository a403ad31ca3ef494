// Mlp and TransformerBlock forward/backward. The residual sums are written into the
// branch's output buffer (a += x), and the gradient sums into the buffer a sub-module's
// backward returned: a sub-module never reads those buffers again, and the buffer it
// reuses next step is free again once nobody else holds it (layer_util.h).
#include "runtime/layers/transformer_block.h"

#include <memory>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Mlp::Mlp(int64_t n_embd, float dropout, uint64_t dropout_seed) {
  fc_ = &add_module("fc", std::make_unique<Linear>(n_embd, 4 * n_embd));
  gelu_ = &add_module("gelu", std::make_unique<GELU>(GeluApproximation::tanh));
  proj_ = &add_module("proj", std::make_unique<Linear>(4 * n_embd, n_embd));
  if (dropout > 0.f) drop_ = &add_module("drop", std::make_unique<Dropout>(dropout, dropout_seed));
}

Tensor Mlp::forward(const Tensor& x) {
  Tensor y = proj_->forward(gelu_->forward(fc_->forward(x)));
  return drop_ ? drop_->forward(y) : y;
}

Tensor Mlp::backward(const Tensor& dy) {
  Tensor g = drop_ ? backward_child(*drop_, dy) : dy;
  g = backward_child(*proj_, g);
  g = backward_child(*gelu_, g);
  return backward_child(*fc_, g);
}

TransformerBlock::TransformerBlock(int64_t n_embd, int64_t n_head, float dropout, uint64_t dropout_seed,
                                   AttentionKernel attention) {
  ln1_ = &add_module("ln1", std::make_unique<LayerNorm>(n_embd));
  // Two dropouts in one block draw different masks: their seeds differ.
  attn_ = &add_module("attn", std::make_unique<CausalSelfAttention>(n_embd, n_head, dropout, dropout_seed * 2 + 1, attention));
  ln2_ = &add_module("ln2", std::make_unique<LayerNorm>(n_embd));
  mlp_ = &add_module("mlp", std::make_unique<Mlp>(n_embd, dropout, dropout_seed * 2 + 2));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  Kernels& k = kernels_for(device_);
  Tensor h = attn_->forward(ln1_->forward(x));
  k.axpy(h.f32(), x.f32(), x.numel(), 1.f);  // h = x + attn(ln1(x))
  Tensor y = mlp_->forward(ln2_->forward(h));
  k.axpy(y.f32(), h.f32(), h.numel(), 1.f);  // y = h + mlp(ln2(h))
  saved_ = true;
  return y;
}

Tensor TransformerBlock::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  check_tensor(kind(), "output gradient", dy, device_);
  Kernels& k = kernels_for(device_);
  Tensor dh = backward_child(*ln2_, backward_child(*mlp_, dy));
  k.axpy(dh.f32(), dy.f32(), dy.numel(), 1.f);  // dh = dy + d(mlp branch)/dh
  Tensor dx = backward_child(*ln1_, backward_child(*attn_, dh));
  k.axpy(dx.f32(), dh.f32(), dh.numel(), 1.f);  // dx = dh + d(attn branch)/dx
  saved_ = false;
  return dx;
}

void TransformerBlock::release_activations() {
  saved_ = false;
  Module::release_activations();  // ln1, attn, ln2, mlp
}

}  // namespace tandem
