// Conv2d forward/backward: per chunk of images, im2col_batched + one GEMM (forward), one
// GEMM for the weight gradient and one + col2im_batched_acc for the input gradient.
#include "runtime/layers/conv2d.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/autocast.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, bool bias)
    : in_(in_channels), out_(out_channels), k_(kernel_size), stride_(stride), pad_(padding) {
  if (in_ <= 0 || out_ <= 0 || k_ <= 0 || stride_ <= 0 || pad_ < 0)
    throw std::invalid_argument(
        "Conv2d: channels, kernel_size and stride must be positive and padding "
        "non-negative, got in=" +
        std::to_string(in_) + " out=" + std::to_string(out_) + " k=" + std::to_string(k_) +
        " stride=" + std::to_string(stride_) + " padding=" + std::to_string(pad_));
  weight_ = &add_parameter("weight", {out_, in_, k_, k_});
  if (bias) bias_ = &add_parameter("bias", {out_});
}

void Conv2d::reset_parameters(uint64_t seed) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_ * k_ * k_));
  init_uniform(*weight_, seed, bound);
  if (bias_) init_uniform(*bias_, seed, bound);
}

int64_t Conv2d::images_per_chunk(int64_t n, int64_t ckk, int64_t ohw) const {
  // On the CPU one image per chunk measured fastest (scripts/bench-single --model cnn: 3-20%
  // ahead of larger chunks): no permutes, and an image's columns stay in cache between
  // im2col and the GEMM. A GPU wants few, large launches.
  const size_t limit = chunk_limit_.value_or(device_.is_cpu() ? 0 : kDefaultChunkLimit);
  const size_t per_image = static_cast<size_t>(std::max(ckk, out_) * ohw) * sizeof(float);
  const size_t fit = per_image == 0 ? static_cast<size_t>(n) : limit / per_image;
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(fit, static_cast<size_t>(n))));
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
  chunk_ = images_per_chunk(n, ckk, ohw);
  // Evaluation rarely runs backward, so it keeps one chunk's columns, whatever the batch.
  const bool keep_all =
      training() && static_cast<size_t>(n * ckk * ohw) * sizeof(float) <= saved_columns_limit_;
  reuse_buffer(cols_, {(keep_all ? n : chunk_) * ckk * ohw}, device_);
  if (chunk_ > 1) reuse_buffer(gemm_out_, {out_ * chunk_ * ohw}, device_);
  const bool bf16 = precision_ == Precision::bf16;
  const Tensor w16 = bf16 ? to_bf16(w16_, weight_->value) : Tensor();  // backward reuses it
  for (int64_t i0 = 0; i0 < n; i0 += chunk_) {
    const int64_t nc = std::min(chunk_, n - i0);
    float* col = cols_.f32() + (keep_all ? i0 * ckk * ohw : 0);
    k.im2col_batched(col, x.f32() + i0 * chw, nc, in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
    // Y' (OC, nc*OH*OW) = W (OC, C*k*k) * col (C*k*k, nc*OH*OW); one image's Y' is its y.
    float* yc = y.f32() + i0 * out_ * ohw;
    float* yt = nc == 1 ? yc : gemm_out_.f32();
    if (bf16)
      k.gemm_bf16(yt, bf16_bits(w16), bf16_bits(to_bf16(col16_, col, ckk * nc * ohw, device_)), out_, nc * ohw,
                  ckk, false, false, 1.f, 0.f);
    else
      k.gemm(yt, weight_->value.f32(), col, out_, nc * ohw, ckk, false, false, 1.f, 0.f);
    if (nc > 1) k.swap_leading(yc, yt, out_, nc, ohw);  // (OC, nc, OH*OW) -> (nc, OC, OH*OW)
  }
  if (bias_) k.add_bias_channels(y.f32(), bias_->value.f32(), n, out_, ohw);

  saved_ = training();  // evaluation keeps nothing for a backward
  bf16_saved_ = bf16;   // backward multiplies in the precision forward did (w16_ is forward's)
  cols_saved_ = keep_all;
  x_shape_ = x.shape();
  x_ = keep_all || !training() ? Tensor() : x;  // with every column kept, backward never reads x
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
  // A frozen weight or bias (runtime/freeze.h) gets no gradient: its products are skipped.
  if (bias_ && bias_->requires_grad) k.sum_channels_acc(grad_ptr(*bias_), dy.f32(), n, out_, ohw);
  float* dw = weight_->requires_grad ? grad_ptr(*weight_) : nullptr;
  const float* wt = weight_->value.f32();
  Tensor dx;
  if (needs_input_grad_) {
    dx = reuse_buffer(dx_cache_, x_shape_, device_);
    reuse_buffer(dcol_, {ckk * chunk_ * ohw}, device_);
    k.fill(dx.f32(), dx.numel(), 0.f);  // col2im_batched_acc adds
  }
  if (chunk_ > 1 && (dw || dx.defined())) reuse_buffer(gemm_out_, {out_ * chunk_ * ohw}, device_);
  for (int64_t i0 = 0; i0 < n && (dw || dx.defined()); i0 += chunk_) {
    const int64_t nc = std::min(chunk_, n - i0);
    // dY' (OC, nc*OH*OW) is dy's chunk (nc, OC, OH*OW) with its leading axes swapped.
    const float* dyc = dy.f32() + i0 * out_ * ohw;
    const float* dyt = dyc;
    if (nc > 1) {
      k.swap_leading(gemm_out_.f32(), dyc, nc, out_, ohw);
      dyt = gemm_out_.f32();
    }
    const Tensor dy16 = bf16_saved_ ? to_bf16(dy16_, dyt, out_ * nc * ohw, device_) : Tensor();
    if (dw) {
      const float* col = cols_.f32() + i0 * ckk * ohw;
      if (!cols_saved_) {
        k.im2col_batched(cols_.f32(), x_.f32() + i0 * chw, nc, in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
        col = cols_.f32();
      }
      // dW (OC, C*k*k) += dY' (OC, nc*OH*OW) * col^T (nc*OH*OW, C*k*k)
      if (bf16_saved_) {
        const Tensor col16 = to_bf16(col16_, col, ckk * nc * ohw, device_);
        k.gemm_bf16(dw, bf16_bits(dy16), bf16_bits(col16), out_, ckk, nc * ohw, false, true, 1.f, 1.f);
      } else {
        k.gemm(dw, dyt, col, out_, ckk, nc * ohw, false, true, 1.f, 1.f);
      }
    }
    if (!dx.defined()) continue;
    // dcol (C*k*k, nc*OH*OW) = W^T (C*k*k, OC) * dY' (OC, nc*OH*OW), then back to images.
    if (bf16_saved_)
      k.gemm_bf16(dcol_.f32(), bf16_bits(w16_), bf16_bits(dy16), ckk, nc * ohw, out_, true, false, 1.f, 0.f);
    else
      k.gemm(dcol_.f32(), wt, dyt, ckk, nc * ohw, out_, true, false, 1.f, 0.f);
    k.col2im_batched_acc(dx.f32() + i0 * chw, dcol_.f32(), nc, in_, h, w, k_, k_, stride_, pad_, oh_, ow_);
  }
  saved_ = false;
  x_ = Tensor();
  return dx;
}

void Conv2d::release_activations() {
  saved_ = false;
  cols_saved_ = false;
  bf16_saved_ = false;
  x_shape_.clear();
  x_ = Tensor();
  cols_ = Tensor();
  dcol_ = Tensor();
  gemm_out_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
  w16_ = Tensor();
  col16_ = Tensor();
  dy16_ = Tensor();
}

}  // namespace tandem
