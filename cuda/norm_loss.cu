// LayerNorm (forward, backward), softmax cross-entropy (forward, backward) and the
// regression losses, MSE and BCE with logits (forward, backward), side by side.
// Invariant: one warp per row for the row statistics, with the CPU's formulas (two-pass
// variance, rstd = 1/sqrt(var+eps), dx = rstd*(g - mean(g) - xhat*mean(g*xhat)),
// loss = log(sum) - (z_label - max); the regression losses' element terms in float and
// their row means in double, as runtime/cpu/cpu_kernels_loss.cpp); dgamma/dbeta are
// column sums through scratch partials in a fixed order, so backward is deterministic. A
// label outside [0, C) is recorded in the device's DeviceError block (copied to the host
// after the kernel and reported at the host's next synchronisation) and that row's loss
// is NaN.
#include <cmath>

#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 1024;

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;  // every lane holds the sum
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}

int64_t row_chunks(int64_t rows) {
  int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}

unsigned row_blocks(int64_t rows) {
  int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return static_cast<unsigned>(b > kMaxBlocks ? kMaxBlocks : b);
}

#define TANDEM_WARP_ROW_LOOP(r, rows)                                                                   \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5); r < (rows); \
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock)

// --- LayerNorm -------------------------------------------------------------------------
// y (rows, cols), mean (rows), rstd (rows) <- x (rows, cols), gamma (cols), beta (cols)
__global__ void layernorm_forward_kernel(float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                         const float* __restrict__ x, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, int64_t rows, int64_t cols, float eps) {
  const int lane = threadIdx.x & 31;
  const float inv_cols = 1.f / static_cast<float>(cols);
  TANDEM_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * cols;
    float s = 0.f;
    for (int64_t c = lane; c < cols; c += 32) s += xr[c];
    const float mu = warp_sum(s) * inv_cols;
    float q = 0.f;
    for (int64_t c = lane; c < cols; c += 32) {
      const float d = xr[c] - mu;
      q += d * d;
    }
    const float var = warp_sum(q) * inv_cols;  // biased, as PyTorch
    const float rs = 1.f / sqrtf(var + eps);
    float* yr = y + r * cols;
    for (int64_t c = lane; c < cols; c += 32) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx (rows, cols) <- dy, x, gamma, mean, rstd
__global__ void layernorm_backward_dx_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                             const float* __restrict__ x, const float* __restrict__ gamma,
                                             const float* __restrict__ mean, const float* __restrict__ rstd,
                                             int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const float inv_cols = 1.f / static_cast<float>(cols);
  TANDEM_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float sgx = 0.f, sg = 0.f;
    for (int64_t c = lane; c < cols; c += 32) {
      const float xhat = (xr[c] - mu) * rs;
      const float g = dyr[c] * gamma[c];
      sgx += g * xhat;
      sg += g;
    }
    const float mean_gx = warp_sum(sgx) * inv_cols;
    const float mean_g = warp_sum(sg) * inv_cols;
    float* dxr = dx + r * cols;
    for (int64_t c = lane; c < cols; c += 32) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

// Column sums of dy*xhat (-> dgamma) and dy (-> dbeta) over one chunk of rows. With one
// chunk they add straight into dgamma/dbeta; otherwise into partial (2, chunks, cols).
__global__ void layernorm_param_partials_kernel(float* __restrict__ dgamma, float* __restrict__ dbeta,
                                                float* __restrict__ partial, const float* __restrict__ dy,
                                                const float* __restrict__ x, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                                int64_t rows_per_chunk, int64_t chunks) {
  __shared__ float tile_g[kRowLanes][kColTile + 1];
  __shared__ float tile_b[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sg = 0.f, sb = 0.f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float d = dy[r * cols + c];
      sg += d * ((x[r * cols + c] - mean[r]) * rstd[r]);
      sb += d;
    }
  tile_g[threadIdx.y][threadIdx.x] = sg;
  tile_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float tg = 0.f, tb = 0.f;
  for (int k = 0; k < kRowLanes; ++k) {
    tg += tile_g[k][threadIdx.x];
    tb += tile_b[k][threadIdx.x];
  }
  if (chunks == 1) {
    dgamma[c] += tg;
    dbeta[c] += tb;
  } else {
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = tg;
    partial[(chunks + blockIdx.y) * cols + c] = tb;
  }
}

__global__ void layernorm_param_finish_kernel(float* __restrict__ dgamma, float* __restrict__ dbeta,
                                              const float* __restrict__ partial, int64_t chunks, int64_t cols) {
  TANDEM_GRID_STRIDE_LOOP(c, cols) {
    float tg = 0.f, tb = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      tg += partial[k * cols + c];
      tb += partial[(chunks + k) * cols + c];
    }
    dgamma[c] += tg;
    dbeta[c] += tb;
  }
}

// --- softmax cross-entropy ------------------------------------------------------------
// probs (rows, classes), losses (rows) <- logits (rows, classes), labels (rows)
__global__ void softmax_xent_forward_kernel(float* __restrict__ probs, float* __restrict__ losses,
                                            const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                            int64_t rows, int64_t classes, DeviceError* error) {
  const int lane = threadIdx.x & 31;
  TANDEM_WARP_ROW_LOOP(r, rows) {
    const float* lr = logits + r * classes;
    float* pr = probs + r * classes;
    float mx = lr[0];
    for (int64_t c = lane; c < classes; c += 32) mx = lr[c] > mx ? lr[c] : mx;
    mx = warp_max(mx);
    // Subtracting the max keeps exp() in (0, 1]: no overflow, and the sum is >= 1.
    float s = 0.f;
    for (int64_t c = lane; c < classes; c += 32) {
      const float e = expf(lr[c] - mx);
      pr[c] = e;
      s += e;
    }
    s = warp_sum(s);
    const float inv = 1.f / s;
    for (int64_t c = lane; c < classes; c += 32) pr[c] *= inv;  // each lane rescales what it wrote
    if (lane == 0) {
      const int32_t label = labels[r];
      if (label < 0 || label >= classes) {
        if (atomicCAS(&error->code, 0, 1) == 0) {
          error->label = label;
          error->row = r;
          error->limit = classes;
        }
        losses[r] = nanf("");
      } else {
        losses[r] = logf(s) - (lr[label] - mx);  // exact even where the probability underflows
      }
    }
  }
}

// dlogits = (probs - onehot(labels)) * scale
__global__ void softmax_xent_backward_kernel(float* __restrict__ dlogits, const float* __restrict__ probs,
                                             const int32_t* __restrict__ labels, int64_t rows, int64_t classes,
                                             float scale) {
  TANDEM_GRID_STRIDE_LOOP(i, rows * classes) {
    const int64_t r = i / classes, c = i - r * classes;
    const float p = probs[i];
    dlogits[i] = c == labels[r] ? (p - 1.f) * scale : p * scale;
  }
}

// --- regression losses ----------------------------------------------------------------
// The CPU's element terms (runtime/cpu/cpu_kernels_loss.cpp), operation for operation.
__device__ __forceinline__ float bce_term(float x, float t) {
  const float hinge = x > 0.f ? x : 0.f;
  return fmaf(-x, t, hinge) + log1pf(expf(-fabsf(x)));
}

__device__ __forceinline__ float stable_sigmoid(float x) {
  if (x >= 0.f) return __fdiv_rn(1.f, 1.f + expf(-x));
  const float e = expf(x);
  return __fdiv_rn(e, 1.f + e);
}

// losses (rows) <- pred (rows, cols), target (rows, cols): each row's mean term, in double.
template <bool kBce>
__global__ void regression_loss_forward_kernel(float* __restrict__ losses, const float* __restrict__ pred,
                                               const float* __restrict__ target, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  TANDEM_WARP_ROW_LOOP(r, rows) {
    const float* pr = pred + r * cols;
    const float* tr = target + r * cols;
    double s = 0;
    for (int64_t c = lane; c < cols; c += 32) {
      if constexpr (kBce) {
        s += bce_term(pr[c], tr[c]);
      } else {
        const double d = __fsub_rn(pr[c], tr[c]);  // its square is exact in double
        s += d * d;
      }
    }
    s = warp_sum(s);
    if (lane == 0) losses[r] = static_cast<float>(s / static_cast<double>(cols));
  }
}

// dpred = scale * 2 * (pred - target) / cols, rounded as the CPU rounds it (no contraction).
__global__ void mse_backward_kernel(float* __restrict__ dpred, const float* __restrict__ pred,
                                    const float* __restrict__ target, int64_t n, float scale, float fcols) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    dpred[i] = __fdiv_rn(__fmul_rn(__fmul_rn(scale, 2.f), __fsub_rn(pred[i], target[i])), fcols);
  }
}

// dlogits = scale * (sigmoid(x) - t) / cols.
__global__ void bce_logits_backward_kernel(float* __restrict__ dlogits, const float* __restrict__ logits,
                                           const float* __restrict__ target, int64_t n, float scale, float fcols) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    dlogits[i] = __fdiv_rn(__fmul_rn(scale, __fsub_rn(stable_sigmoid(logits[i]), target[i])), fcols);
  }
}

}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(y, mean, rstd, x, gamma, beta, rows, cols,
                                                                      eps);
  TANDEM_CUDA_CHECK_LAUNCH(layernorm_forward_kernel);
}

size_t layernorm_backward_scratch(int64_t rows, int64_t cols) {
  const int64_t chunks = row_chunks(rows);
  return chunks > 1 ? static_cast<size_t>(2 * chunks * cols) : 0;
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, float* scratch,
                        cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  layernorm_backward_dx_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dx, dy, x, gamma, mean, rstd, rows, cols);
  TANDEM_CUDA_CHECK_LAUNCH(layernorm_backward_dx_kernel);
  const int64_t chunks = row_chunks(rows);
  const int64_t per = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  layernorm_param_partials_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(dgamma, dbeta, scratch, dy, x,
                                                                                  mean, rstd, rows, cols, per, chunks);
  TANDEM_CUDA_CHECK_LAUNCH(layernorm_param_partials_kernel);
  if (chunks == 1) return;
  layernorm_param_finish_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(dgamma, dbeta, scratch, chunks, cols);
  TANDEM_CUDA_CHECK_LAUNCH(layernorm_param_finish_kernel);
}

void softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels, int64_t rows,
                          int64_t classes, DeviceError* error, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return;
  softmax_xent_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(probs, losses, logits, labels, rows,
                                                                         classes, error);
  TANDEM_CUDA_CHECK_LAUNCH(softmax_xent_forward_kernel);
}

void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int64_t rows,
                           int64_t classes, float scale, cudaStream_t stream) {
  const int64_t n = rows * classes;
  if (n <= 0) return;
  softmax_xent_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dlogits, probs, labels, rows, classes, scale);
  TANDEM_CUDA_CHECK_LAUNCH(softmax_xent_backward_kernel);
}

void mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols,
                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  regression_loss_forward_kernel<false><<<row_blocks(rows), kThreads, 0, stream>>>(losses, pred, target, rows, cols);
  TANDEM_CUDA_CHECK_LAUNCH(regression_loss_forward_kernel);
}

void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols, float scale,
                  cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  mse_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dpred, pred, target, n, scale,
                                                              static_cast<float>(cols));
  TANDEM_CUDA_CHECK_LAUNCH(mse_backward_kernel);
}

void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows, int64_t cols,
                        cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  regression_loss_forward_kernel<true><<<row_blocks(rows), kThreads, 0, stream>>>(losses, logits, target, rows,
                                                                                  cols);
  TANDEM_CUDA_CHECK_LAUNCH(regression_loss_forward_kernel);
}

void bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows, int64_t cols,
                         float scale, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  bce_logits_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dlogits, logits, target, n, scale,
                                                                     static_cast<float>(cols));
  TANDEM_CUDA_CHECK_LAUNCH(bce_logits_backward_kernel);
}

}  // namespace tandem::cuda::launch
