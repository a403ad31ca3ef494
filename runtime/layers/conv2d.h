// Conv2d: 2-D convolution over NCHW tensors, as torch.nn.Conv2d (square kernel, same
// stride and zero padding on both axes, no groups or dilation), by im2col + GEMM over
// chunks of images: one im2col_batched and one GEMM per chunk, forward and backward, so a
// GPU sees a handful of large launches per layer instead of a few per image.
// Invariant: for a chunk of nc images, Y' (OC, nc*OH*OW) = W (OC, C*k*k) * col (C*k*k,
// nc*OH*OW), and y is Y' with its two leading axes swapped into (nc, OC, OH*OW); a chunk
// of one image needs no swap. Chunks are as large as the chunk limit allows (each
// per-chunk buffer stays under it; by default one image on the CPU, 256 MiB on a GPU).
// A training forward keeps every chunk's columns for backward when the batch's columns
// fit in the saved-columns limit; otherwise (and in evaluation) it keeps only the input
// and backward rebuilds each chunk's columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class Conv2d final : public Module {
 public:
  // bias = false: no "bias" parameter and no bias add (torchvision's convs before a BatchNorm).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true);
  std::string kind() const override { return "Conv2d"; }
  // x (N, C, H, W) -> y (N, OC, OH, OW), OH = (H + 2*padding - k) / stride + 1 (floor).
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;
  // weight and bias ~ U(-1/sqrt(C*k*k), 1/sqrt(C*k*k)), PyTorch's default bound.
  void reset_parameters(uint64_t seed) override;

  // When the batch's columns exceed this many bytes, forward keeps only the input and
  // backward rebuilds each chunk's columns (time for memory). Default 256 MiB.
  void set_saved_columns_limit(size_t bytes) { saved_columns_limit_ = bytes; }
  // Bytes each per-chunk buffer (columns, their gradient, the output or output gradient
  // in GEMM layout) may take; a chunk holds at least one image. Default: one image per
  // chunk on the CPU (fastest there), 256 MiB on a GPU.
  void set_chunk_limit(size_t bytes) { chunk_limit_ = bytes; }

 private:
  // Images per chunk for a batch of n: as many as the chunk limit allows, at least 1.
  int64_t images_per_chunk(int64_t n, int64_t ckk, int64_t ohw) const;

  int64_t in_, out_, k_, stride_, pad_;
  size_t saved_columns_limit_ = size_t{256} << 20;
  static constexpr size_t kDefaultChunkLimit = size_t{256} << 20;
  std::optional<size_t> chunk_limit_;  // unset: the device's default
  Parameter* weight_;  // (OC, C, k, k), read as (OC, C*k*k)
  Parameter* bias_ = nullptr;  // (OC), absent when bias = false
  // Saved by forward for backward.
  bool saved_ = false;
  bool cols_saved_ = false;  // cols_ holds every image's columns
  Shape x_shape_;            // (N, C, H, W)
  int64_t oh_ = 0, ow_ = 0;
  int64_t chunk_ = 1;  // images per chunk, fixed by forward for its backward
  Tensor x_;           // kept only when backward must read the input itself
  // Scratch owned by the layer, reused across steps. Chunk j's columns (C*k*k, nc*OH*OW)
  // start at image j*chunk_ of cols_ when every chunk is kept, at 0 otherwise.
  Tensor cols_;      // flat: N or chunk_ images of (C*k*k, OH*OW)
  Tensor dcol_;      // (C*k*k, chunk_*OH*OW)
  Tensor gemm_out_;  // (OC, chunk_*OH*OW): forward's Y', backward's dY'
  Tensor y_cache_, dx_cache_;
  // Precision::bf16: forward's weight copy (read by backward), and per-chunk operands.
  bool bf16_saved_ = false;
  Tensor w16_, col16_, dy16_;
};

}  // namespace tandem
