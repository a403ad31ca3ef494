// Convolution's column transforms (im2col forward, col2im_acc backward, per image or for
// a batch at once), the leading-axes swap between GEMM layout and NCHW, and max pooling
// (forward, backward), side by side. The per-image transforms are the batch of one.
// Invariant: col row (ch, ki, kj), column (oy, ox) holds img[ch, oy*s-pad+ki, ox*s-pad+kj]
// (0 outside), as on the CPU. col2im_acc gathers per image pixel, adding its (ki, kj)
// contributions in the CPU's order, so it needs no atomics and matches the CPU bit for
// bit. maxpool's argmax is the flat h*W+w index of the first maximum of its window, and
// its backward adds shared maxima in the CPU's order (no atomics either).
#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

// --- im2col / col2im -------------------------------------------------------------------
// col (C*KH*KW, N*OH*OW) <- img (N, C, H, W); column i*OH*OW + pixel belongs to image i.
__global__ void im2col_kernel(float* __restrict__ col, const float* __restrict__ img, int64_t n, int64_t c,
                              int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                              int64_t oh, int64_t ow) {
  const int64_t ohw = oh * ow, row_len = n * ohw;
  TANDEM_GRID_STRIDE_LOOP(idx, c * kh * kw * row_len) {
    const int64_t row = idx / row_len, rest = idx - row * row_len;
    const int64_t i = rest / ohw, pos = rest - i * ohw;
    const int64_t oy = pos / ow, ox = pos - oy * ow;
    const int64_t kj = row % kw, ki = (row / kw) % kh, ch = row / (kw * kh);
    const int64_t iy = oy * stride - pad + ki, ix = ox * stride - pad + kj;
    col[idx] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? img[((i * c + ch) * h + iy) * w + ix] : 0.f;
  }
}

// img (N, C, H, W) += col (C*KH*KW, N*OH*OW), one thread per image pixel.
__global__ void col2im_acc_kernel(float* __restrict__ img, const float* __restrict__ col, int64_t n, int64_t c,
                                  int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                                  int64_t oh, int64_t ow) {
  const int64_t ohw = oh * ow, row_len = n * ohw;
  TANDEM_GRID_STRIDE_LOOP(idx, n * c * h * w) {
    const int64_t x = idx % w, y = (idx / w) % h, ch = (idx / (h * w)) % c, i = idx / (c * h * w);
    const float* image_cols = col + i * ohw;
    float acc = img[idx];
    for (int64_t ki = 0; ki < kh; ++ki) {
      const int64_t ty = y + pad - ki;  // = oy * stride for the output row that reads (y, x)
      if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;
      const int64_t oy = ty / stride;
      for (int64_t kj = 0; kj < kw; ++kj) {
        const int64_t tx = x + pad - kj;
        if (tx < 0 || tx % stride != 0 || tx / stride >= ow) continue;
        acc += image_cols[((ch * kh + ki) * kw + kj) * row_len + oy * ow + tx / stride];
      }
    }
    img[idx] = acc;
  }
}

// dst (B, A, inner) <- src (A, B, inner), one thread per output element.
__global__ void swap_leading_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t a, int64_t b,
                                    int64_t inner) {
  TANDEM_GRID_STRIDE_LOOP(idx, a * b * inner) {
    const int64_t k = idx % inner, ji = idx / inner;  // ji = j*a + i
    const int64_t i = ji % a, j = ji / a;
    dst[idx] = src[(i * b + j) * inner + k];
  }
}

// --- max pooling -----------------------------------------------------------------------
// y, argmax (planes, OH, OW) <- x (planes, H, W)
__global__ void maxpool_forward_kernel(float* __restrict__ y, int32_t* __restrict__ argmax,
                                       const float* __restrict__ x, int64_t planes, int64_t h, int64_t w, int64_t k,
                                       int64_t stride, int64_t oh, int64_t ow) {
  const int64_t ohw = oh * ow;
  TANDEM_GRID_STRIDE_LOOP(idx, planes * ohw) {
    const int64_t p = idx / ohw, pos = idx - p * ohw;
    const int64_t oy = pos / ow, ox = pos - oy * ow;
    const float* plane = x + p * h * w;
    const int64_t origin = oy * stride * w + ox * stride;
    float best = plane[origin];
    int64_t best_idx = origin;
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        const int64_t i = origin + ki * w + kj;
        const float v = plane[i];
        // Strictly greater: the first maximum wins; a NaN wins (once) and propagates.
        const bool take = v > best || (v != v && best == best);
        best = take ? v : best;
        best_idx = take ? i : best_idx;
      }
    y[idx] = best;
    argmax[idx] = static_cast<int32_t>(best_idx);
  }
}

// dx (planes, H, W) += dy routed to each window's argmax (dx zeroed first by the launcher).
// Overlapping windows (stride < k) may share a maximum, so the adds are ordered as on the
// CPU (outputs in increasing order) instead of racing through float atomics: one warp
// walks a plane's outputs 32 at a time; the lowest lane of each group of lanes with the
// same argmax adds the group's dy in lane order. The warp's chunks run in order, so every
// input gets the CPU's additions in the CPU's order: bit-exact and deterministic.
constexpr int kPoolWarps = kThreads / 32;  // one plane per warp

__global__ void maxpool_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                        const int32_t* __restrict__ argmax, int64_t planes, int64_t hw,
                                        int64_t ohw) {
  __shared__ float vals[kPoolWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kPoolWarps + warp; p < planes;
       p += static_cast<int64_t>(gridDim.x) * kPoolWarps) {  // warp-uniform: the whole warp takes a plane
    float* plane = dx + p * hw;
    for (int64_t o0 = 0; o0 < ohw; o0 += 32) {
      const int64_t o = o0 + lane;
      const bool valid = o < ohw;
      const int32_t target = valid ? argmax[p * ohw + o] : -1;  // -1: past the plane's last output
      vals[warp][lane] = valid ? dy[p * ohw + o] : 0.f;
      const unsigned same = __match_any_sync(0xffffffffu, target);
      __syncwarp();  // vals visible to the warp
      if (valid && (same & ((1u << lane) - 1u)) == 0) {  // the group's lowest lane
        float acc = plane[target];
        for (unsigned m = same; m != 0; m &= m - 1) acc += vals[warp][__ffs(static_cast<int>(m)) - 1];
        plane[target] = acc;
      }
      __syncwarp();  // this chunk's writes land before the next chunk reads or refills vals
    }
  }
}

}  // namespace

void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                    int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow, cudaStream_t stream) {
  const int64_t total = c * kh * kw * n * oh * ow;
  if (total <= 0) return;
  im2col_kernel<<<blocks_for(total), kThreads, 0, stream>>>(col, img, n, c, h, w, kh, kw, stride, pad, oh, ow);
  TANDEM_CUDA_CHECK_LAUNCH(im2col_kernel);
}

void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                        int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow, cudaStream_t stream) {
  const int64_t total = n * c * h * w;
  if (total <= 0 || oh <= 0 || ow <= 0) return;
  col2im_acc_kernel<<<blocks_for(total), kThreads, 0, stream>>>(img, col, n, c, h, w, kh, kw, stride, pad, oh,
                                                                 ow);
  TANDEM_CUDA_CHECK_LAUNCH(col2im_acc_kernel);
}

void swap_leading(float* dst, const float* src, int64_t a, int64_t b, int64_t inner, cudaStream_t stream) {
  const int64_t total = a * b * inner;
  if (total <= 0) return;
  swap_leading_kernel<<<blocks_for(total), kThreads, 0, stream>>>(dst, src, a, b, inner);
  TANDEM_CUDA_CHECK_LAUNCH(swap_leading_kernel);
}

void maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t planes, int64_t h, int64_t w, int64_t k,
                     int64_t stride, int64_t oh, int64_t ow, cudaStream_t stream) {
  const int64_t n = planes * oh * ow;
  if (n <= 0) return;
  maxpool_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, argmax, x, planes, h, w, k, stride, oh, ow);
  TANDEM_CUDA_CHECK_LAUNCH(maxpool_forward_kernel);
}

void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t planes, int64_t h, int64_t w,
                      int64_t oh, int64_t ow, cudaStream_t stream) {
  if (planes * h * w <= 0) return;
  TANDEM_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * h * w) * sizeof(float), stream), -1);
  if (oh * ow <= 0) return;
  maxpool_backward_kernel<<<blocks_for(planes, kPoolWarps), kThreads, 0, stream>>>(dx, dy, argmax, planes, h * w,
                                                                                  oh * ow);
  TANDEM_CUDA_CHECK_LAUNCH(maxpool_backward_kernel);
}

}  // namespace tandem::cuda::launch
