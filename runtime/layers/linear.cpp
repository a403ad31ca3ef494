// Linear forward/backward: one GEMM forward, two GEMMs and a row sum backward.
#include "runtime/layers/linear.h"

#include <cmath>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/autocast.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0 || out_features <= 0)
    throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                std::to_string(in_features) + " and " + std::to_string(out_features));
  weight_ = &add_parameter("weight", {out_, in_});
  if (bias) bias_ = &add_parameter("bias", {out_});
}

void Linear::reset_parameters(uint64_t seed) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
  init_uniform(*weight_, seed, bound);
  if (bias_) init_uniform(*bias_, seed, bound);
}

Tensor Linear::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  if (x.ndim() < 2 || x.dim(-1) != in_)
    throw_shape_error(kind(), "input", "(N, " + std::to_string(in_) + ")", x.shape());
  const int64_t rows = x.numel() / in_;
  Shape y_shape = x.shape();
  y_shape.back() = out_;
  Kernels& k = kernels_for(device_);
  Tensor y = reuse_buffer(y_cache_, y_shape, device_);
  // y (rows, out) = x (rows, in) * W^T (in, out)
  if (precision_ == Precision::bf16) {
    const Tensor x16 = to_bf16(x16_, x);
    const Tensor w16 = to_bf16(w16_, weight_->value);  // backward reuses it: same weights
    k.gemm_bf16(y.f32(), bf16_bits(x16), bf16_bits(w16), rows, out_, in_, false, true, 1.f, 0.f);
    if (training_) x_ = x16;  // backward needs only the bf16 copy: the input's buffer is free
  } else {
    k.gemm(y.f32(), x.f32(), weight_->value.f32(), rows, out_, in_, false, true, 1.f, 0.f);
    if (training_) x_ = x;  // evaluation keeps nothing: the input's buffer is free again
  }
  if (bias_) k.add_bias_rows(y.f32(), bias_->value.f32(), rows, out_);
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  check_saved(kind(), x_.defined());
  check_tensor(kind(), "output gradient", dy, device_);
  Shape y_shape = x_.shape();
  y_shape.back() = out_;
  if (dy.shape() != y_shape)
    throw_shape_error(kind(), "output gradient", shape_str(y_shape), dy.shape());
  const int64_t rows = x_.numel() / in_;
  Kernels& k = kernels_for(device_);
  const bool bf16 = x_.dtype() == DType::bf16;
  const Tensor dy16 = bf16 ? to_bf16(dy16_, dy) : Tensor();
  // dW (out, in) += dy^T (out, rows) * x (rows, in); beta = 1 accumulates. Frozen: skipped.
  if (weight_->requires_grad) {
    if (bf16)
      k.gemm_bf16(grad_ptr(*weight_), bf16_bits(dy16), bf16_bits(x_), out_, in_, rows, true, false, 1.f, 1.f);
    else
      k.gemm(grad_ptr(*weight_), dy.f32(), x_.f32(), out_, in_, rows, true, false, 1.f, 1.f);
  }
  if (bias_ && bias_->requires_grad) k.sum_rows_acc(grad_ptr(*bias_), dy.f32(), rows, out_);
  Tensor dx;
  if (needs_input_grad_) {
    dx = reuse_buffer(dx_cache_, x_.shape(), device_);
    // dx (rows, in) = dy (rows, out) * W (out, in)
    if (bf16)
      k.gemm_bf16(dx.f32(), bf16_bits(dy16), bf16_bits(w16_), rows, in_, out_, false, false, 1.f, 0.f);
    else
      k.gemm(dx.f32(), dy.f32(), weight_->value.f32(), rows, in_, out_, false, false, 1.f, 0.f);
  }
  x_ = Tensor();
  return dx;
}

void Linear::release_activations() {
  x_ = Tensor();
  w16_ = Tensor();
  x16_ = Tensor();
  dy16_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
}

}  // namespace tandem
