// TiedLinear forward/backward: one GEMM forward, two backward, through a borrowed weight.
#include "runtime/layers/tied_linear.h"

#include "runtime/kernels.h"
#include "runtime/layers/autocast.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

TiedLinear::TiedLinear(Parameter& weight) : weight_(weight) {
  if (weight.value.ndim() != 2) throw_shape_error(kind(), "tied weight", "(out, in)", weight.value.shape());
}

Tensor TiedLinear::forward(const Tensor& x) {
  const Device device = weight_.value.device();
  check_tensor(kind(), "input", x, device);
  const int64_t out = weight_.value.dim(0), in = weight_.value.dim(1);
  if (x.ndim() < 2 || x.dim(-1) != in) throw_shape_error(kind(), "input", "(..., " + std::to_string(in) + ")", x.shape());
  const int64_t rows = x.numel() / in;
  Tensor y = reuse_buffer(y_cache_, {rows, out}, device);
  // y (rows, out) = x (rows, in) * W^T (in, out)
  if (precision_ == Precision::bf16) {
    const Tensor x16 = to_bf16(x16_, x);
    const Tensor w16 = to_bf16(w16_, weight_.value);  // backward reuses it: same weights
    kernels_for(device).gemm_bf16(y.f32(), bf16_bits(x16), bf16_bits(w16), rows, out, in, false, true, 1.f, 0.f);
    if (training_) x_ = x16;
  } else {
    kernels_for(device).gemm(y.f32(), x.f32(), weight_.value.f32(), rows, out, in, false, true, 1.f, 0.f);
    if (training_) x_ = x;
  }
  return y;
}

Tensor TiedLinear::backward(const Tensor& dy) {
  check_saved(kind(), x_.defined());
  const Device device = weight_.value.device();
  check_tensor(kind(), "output gradient", dy, device);
  const int64_t out = weight_.value.dim(0), in = weight_.value.dim(1);
  const int64_t rows = x_.numel() / in;
  if (dy.shape() != Shape{rows, out}) throw_shape_error(kind(), "output gradient", shape_str({rows, out}), dy.shape());
  Kernels& k = kernels_for(device);
  Tensor dx = reuse_buffer(dx_cache_, x_.shape(), device);
  // A frozen weight (runtime/freeze.h) gets no dW.
  const bool dw = weight_.requires_grad;
  if (x_.dtype() == DType::bf16) {
    const Tensor dy16 = to_bf16(dy16_, dy);
    if (dw) k.gemm_bf16(grad_ptr(weight_), bf16_bits(dy16), bf16_bits(x_), out, in, rows, true, false, 1.f, 1.f);
    k.gemm_bf16(dx.f32(), bf16_bits(dy16), bf16_bits(w16_), rows, in, out, false, false, 1.f, 0.f);
  } else {
    // dW (out, in) += dy^T (out, rows) * x (rows, in)
    if (dw) k.gemm(grad_ptr(weight_), dy.f32(), x_.f32(), out, in, rows, true, false, 1.f, 1.f);
    // dx (rows, in) = dy (rows, out) * W (out, in)
    k.gemm(dx.f32(), dy.f32(), weight_.value.f32(), rows, in, out, false, false, 1.f, 0.f);
  }
  x_ = Tensor();
  return dx;
}

void TiedLinear::release_activations() {
  x_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
  w16_ = Tensor();
  x16_ = Tensor();
  dy16_ = Tensor();
}

}  // namespace tandem
