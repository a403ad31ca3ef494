// Conv2d forward/backward: im2col + one GEMM per image; col2im_acc for the input gradient.
#include "runtime/layers/conv2d.h"

#include <cmath>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding)
    : in_(in_channels), out_(out_channels), k_(kernel_size), stride_(stride), pad_(padding) {
  if (in_ <= 0 || out_ <= 0 || k_ <= 0 || stride_ <= 0 || pad_ < 0)
    throw std::invalid_argument(
        "Conv2d: channels, kernel_size and stride must be positive and padding "
        "non-negative, got in=" +
        std::to_string(in_) + " out=" + std::to_string(out_) + " k=" + std::to_string(k_) +
        " stride=" + std::to_string(stride_) + " padding=" + std::to_string(pad_));
  weight_ = &add_parameter("weight", {out_, in_, k_, k_});
  bias_ = &add_parameter("bias", {out_});
}

void Conv2d::reset_parameters(uint64_t seed) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_ * k_ * k_));
  init_uniform(*weight_, seed, bound);
  init_uniform(*bias_, seed, bound);
}

Tensor Conv2d::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  const std::string expected = "(N, " + std::to_string(in_) + ", H, W) with H, W >= " +
                               std::to_string(k_ - 2 * pad_ > 1 ? k_ - 2 * pad_ : 1);
  if (x.ndim() != 4 || x.dim(1) != in_) throw_shape_error(kind(), "input", expected, x.shape());
  const int64_t n = x.dim(0), h = x.dim(2), w = x.dim(3);
  if (h + 2 * pad_ < k_ || w + 2 * pad_ < k_ || h == 0 || w == 0)
    throw_shape_error(kind(), "input", expected, x.shape());
  oh_ = (h + 2 * pad_ - k_) / stride_ + 1;
  ow_ = (w + 2 * pad_ - k_) / stride_ + 1;
  const int64_t ckk = in_ * k_ * k_, ohw = oh_ * ow_, chw = in_ * h * w;

  Kernels& k = kernels_for(device_);
  Tensor y = reuse_buffer(y_cache_, {n, out_, oh_, ow_}, device_);
  // Evaluation rarely runs backward, so it keeps one image's columns, whatever the batch.
  const bool keep_all = training() && !direct() &&
                        static_cast<size_t>(n * ckk * ohw) * sizeof(float) <= saved_columns_limit_;
  if (!direct()) reuse_buffer(cols_, keep_all ? Shape{n, ckk, ohw} : Shape{ckk, ohw}, device_);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.f32() + i * chw;
    const float* col = xi;
    if (!direct()) {
      float* c = cols_.f32() + (keep_all ? i * ckk * ohw : 0);
      k.im2col(c, xi, in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
      col = c;
    }
    // y_i (OC, OH*OW) = W (OC, C*k*k) * col_i (C*k*k, OH*OW)
    k.gemm(y.f32() + i * out_ * ohw, weight_->value.f32(), col, out_, ohw, ckk, false, false, 1.f, 0.f);
  }
  k.add_bias_channels(y.f32(), bias_->value.f32(), n, out_, ohw);

  saved_ = true;
  cols_saved_ = keep_all;
  x_shape_ = x.shape();
  x_ = keep_all ? Tensor() : x;  // with every column kept, backward never reads x
  return y;
}

Tensor Conv2d::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  check_tensor(kind(), "output gradient", dy, device_);
  const int64_t n = x_shape_[0], h = x_shape_[2], w = x_shape_[3];
  const Shape y_shape{n, out_, oh_, ow_};
  if (dy.shape() != y_shape)
    throw_shape_error(kind(), "output gradient", shape_str(y_shape), dy.shape());
  const int64_t ckk = in_ * k_ * k_, ohw = oh_ * ow_, chw = in_ * h * w;

  Kernels& k = kernels_for(device_);
  k.sum_channels_acc(grad_ptr(*bias_), dy.f32(), n, out_, ohw);
  float* dw = grad_ptr(*weight_);
  const float* wt = weight_->value.f32();
  Tensor dx;
  if (needs_input_grad_) {
    dx = reuse_buffer(dx_cache_, x_shape_, device_);
    if (!direct()) {
      reuse_buffer(dcol_, {ckk, ohw}, device_);
      k.fill(dx.f32(), dx.numel(), 0.f);  // col2im_acc adds
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* dyi = dy.f32() + i * out_ * ohw;
    const float* col;
    if (direct()) {
      col = x_.f32() + i * chw;
    } else if (cols_saved_) {
      col = cols_.f32() + i * ckk * ohw;
    } else {
      k.im2col(cols_.f32(), x_.f32() + i * chw, in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
      col = cols_.f32();
    }
    // dW (OC, C*k*k) += dy_i (OC, OH*OW) * col_i^T (OH*OW, C*k*k)
    k.gemm(dw, dyi, col, out_, ckk, ohw, false, true, 1.f, 1.f);
    if (!dx.defined()) continue;
    // dcol_i (C*k*k, OH*OW) = W^T (C*k*k, OC) * dy_i (OC, OH*OW); for a direct conv that is dx_i.
    float* dxi = dx.f32() + i * chw;
    if (direct()) {
      k.gemm(dxi, wt, dyi, ckk, ohw, out_, true, false, 1.f, 0.f);
    } else {
      k.gemm(dcol_.f32(), wt, dyi, ckk, ohw, out_, true, false, 1.f, 0.f);
      k.col2im_acc(dxi, dcol_.f32(), in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
    }
  }
  saved_ = false;
  x_ = Tensor();
  return dx;
}

}  // namespace tandem
