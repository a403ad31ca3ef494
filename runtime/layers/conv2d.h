// Conv2d: 2-D convolution over NCHW tensors, as torch.nn.Conv2d (square kernel, same
// stride and zero padding on both axes, no groups or dilation), by im2col + GEMM.
// Invariant: per image, y_n (OC, OH*OW) = W (OC, C*k*k) * col_n (C*k*k, OH*OW), so the
// output lands in NCHW with no permute. A training forward keeps the whole batch's
// columns for backward when they fit in a byte limit; otherwise (and in evaluation) it
// keeps only the input and backward rebuilds one image's columns at a time. A 1x1,
// stride 1, unpadded conv needs no columns at all (the image is its own column matrix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/module.h"

namespace tandem {

class Conv2d final : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0);
  std::string kind() const override { return "Conv2d"; }
  // x (N, C, H, W) -> y (N, OC, OH, OW), OH = (H + 2*padding - k) / stride + 1 (floor).
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // weight and bias ~ U(-1/sqrt(C*k*k), 1/sqrt(C*k*k)), PyTorch's default bound.
  void reset_parameters(uint64_t seed) override;

  // When the batch's columns exceed this many bytes, forward keeps only the input and
  // backward rebuilds each image's columns (time for memory). Default 256 MiB.
  void set_saved_columns_limit(size_t bytes) { saved_columns_limit_ = bytes; }

 private:
  bool direct() const { return k_ == 1 && stride_ == 1 && pad_ == 0; }

  int64_t in_, out_, k_, stride_, pad_;
  size_t saved_columns_limit_ = size_t{256} << 20;
  Parameter* weight_;  // (OC, C, k, k), read as (OC, C*k*k)
  Parameter* bias_;    // (OC)
  // Saved by forward for backward.
  bool saved_ = false;
  bool cols_saved_ = false;  // cols_ holds every image's columns
  Shape x_shape_;            // (N, C, H, W)
  int64_t oh_ = 0, ow_ = 0;
  Tensor x_;  // kept only when backward must read the input itself
  // Scratch owned by the layer, reused across steps.
  Tensor cols_;  // (N, C*k*k, OH*OW) or (C*k*k, OH*OW)
  Tensor dcol_;  // (C*k*k, OH*OW)
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
