// Batch normalisation (runtime/layers/batchnorm.h): forward's per-channel statistics, the
// moments and running-statistics update, the normalisation, and backward's per-channel
// sums and input gradient, side by side.
// Invariant: the per-channel sums go through double partials (a block per channel and
// chunk of its N*S values), added in chunk order by one thread per channel, so they are
// deterministic without atomics; the moments, the running statistics and every
// elementwise formula are the CPU's (runtime/cpu/cpu_kernels_batchnorm.cpp) operation for
// operation, the FMAs and roundings spelled out, so that from the same statistics both
// devices produce the same bits. Only the order of the sums' additions differs. Nothing
// here reads back to the host: the count comes from the stats tensor on the device.
#include <cmath>

#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

constexpr int64_t kValuesPerBlock = 4096;  // of one channel, at least, before a second chunk
constexpr int64_t kMaxChunks = 256;

int64_t channel_chunks(int64_t m) {
  const int64_t k = (m + kValuesPerBlock - 1) / kValuesPerBlock;
  return k < 1 ? 1 : (k > kMaxChunks ? kMaxChunks : k);
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Both values summed over the block; thread 0 gets the totals.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads / 32], sb[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = 0;
    b = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      a += sa[w];
      b += sb[w];
    }
  }
}

// Block (channel ch, chunk k) over values [k * per, (k + 1) * per) of channel ch of
// (N, C, S): partial[(ch * chunks + k) * 2 + {0, 1}] = the chunk's
//   kGrad false: sum a, sum a^2                       (a = x)
//   kGrad true:  sum a, sum a * xhat, xhat = (x - mean) * invstd   (a = dy)
template <bool kGrad>
__global__ void channel_partials_kernel(double* __restrict__ partial, const float* __restrict__ a,
                                        const float* __restrict__ x, const float* __restrict__ mean,
                                        const float* __restrict__ invstd, int64_t c, int64_t s, int64_t m,
                                        int64_t per, int64_t chunks) {
  const int64_t ch = blockIdx.x, k = blockIdx.y;
  const int64_t e0 = k * per, e1 = e0 + per < m ? e0 + per : m;
  float mu = 0.f, is = 0.f;
  if constexpr (kGrad) {
    mu = mean[ch];
    is = invstd[ch];
  }
  double s1 = 0, s2 = 0;
  for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int64_t i = e / s, idx = (i * c + ch) * s + (e - i * s);
    const double v = a[idx];
    s1 += v;
    if constexpr (kGrad) {
      s2 += v * static_cast<double>(__fmul_rn(__fsub_rn(x[idx], mu), is));
    } else {
      s2 += v * v;  // exact: a float's square fits a double
    }
  }
  block_sum2(s1, s2);
  if (threadIdx.x == 0) {
    partial[(ch * chunks + k) * 2] = s1;
    partial[(ch * chunks + k) * 2 + 1] = s2;
  }
}

// out (2C [+ 1]) = the partials of each channel in chunk order, as floats; count, when
// given (>= 0), into out[2C].
__global__ void channel_finish_kernel(float* __restrict__ out, const double* __restrict__ partial, int64_t c,
                                      int64_t chunks, float count) {
  TANDEM_GRID_STRIDE_LOOP(ch, c) {
    double t1 = 0, t2 = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      t1 += partial[(ch * chunks + k) * 2];
      t2 += partial[(ch * chunks + k) * 2 + 1];
    }
    out[ch] = static_cast<float>(t1);
    out[c + ch] = static_cast<float>(t2);
    if (ch == 0 && count >= 0.f) out[2 * c] = count;
  }
}

// mean, invstd (C) <- stats (2C + 1); running statistics and the batch count in place.
__global__ void batchnorm_train_moments_kernel(float* __restrict__ mean, float* __restrict__ invstd,
                                               float* __restrict__ running_mean, float* __restrict__ running_var,
                                               int64_t* __restrict__ num_batches_tracked,
                                               const float* __restrict__ stats, int64_t c, float eps,
                                               float momentum) {
  const double count = stats[2 * c], m = momentum;
  TANDEM_GRID_STRIDE_LOOP(ch, c) {
    const double mu = __ddiv_rn(static_cast<double>(stats[ch]), count);
    double var = fma(-mu, mu, __ddiv_rn(static_cast<double>(stats[c + ch]), count));
    var = var > 0.0 ? var : 0.0;
    mean[ch] = static_cast<float>(mu);
    invstd[ch] = static_cast<float>(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, static_cast<double>(eps)))));
    const double unbiased = count > 1.0 ? __ddiv_rn(__dmul_rn(var, count), __dsub_rn(count, 1.0)) : var;
    running_mean[ch] = static_cast<float>(fma(m, mu, __dmul_rn(__dsub_rn(1.0, m), running_mean[ch])));
    running_var[ch] = static_cast<float>(fma(m, unbiased, __dmul_rn(__dsub_rn(1.0, m), running_var[ch])));
    if (ch == 0) *num_batches_tracked += 1;
  }
}

__global__ void batchnorm_eval_invstd_kernel(float* __restrict__ invstd, const float* __restrict__ running_var,
                                             int64_t c, float eps) {
  TANDEM_GRID_STRIDE_LOOP(ch, c) {
    invstd[ch] = static_cast<float>(
        __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(static_cast<double>(running_var[ch]), static_cast<double>(eps)))));
  }
}

// y (N, C, S) = fma(x - mean, invstd * weight, bias)
__global__ void batchnorm_forward_kernel(float* __restrict__ y, const float* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ invstd,
                                         const float* __restrict__ weight, const float* __restrict__ bias, int64_t c,
                                         int64_t s, int64_t total) {
  TANDEM_GRID_STRIDE_LOOP(e, total) {
    const int64_t ch = (e / s) % c;
    const float a = weight ? __fmul_rn(invstd[ch], weight[ch]) : invstd[ch];
    y[e] = fmaf(__fsub_rn(x[e], mean[ch]), a, bias ? bias[ch] : 0.f);
  }
}

// dx (N, C, S) = (weight * invstd) * fma(-xhat, sum_dy_xhat / M, dy - sum_dy / M), M = count[0]
__global__ void batchnorm_backward_dx_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                             const float* __restrict__ x, const float* __restrict__ mean,
                                             const float* __restrict__ invstd, const float* __restrict__ weight,
                                             const float* __restrict__ sums, const float* __restrict__ count,
                                             int64_t c, int64_t s, int64_t total) {
  const float m = count[0];
  TANDEM_GRID_STRIDE_LOOP(e, total) {
    const int64_t ch = (e / s) % c;
    const float is = invstd[ch];
    const float k = weight ? __fmul_rn(weight[ch], is) : is;
    const float mean_dy = __fdiv_rn(sums[ch], m), mean_dy_xhat = __fdiv_rn(sums[c + ch], m);
    const float xhat = __fmul_rn(__fsub_rn(x[e], mean[ch]), is);
    dx[e] = __fmul_rn(k, fmaf(-xhat, mean_dy_xhat, __fsub_rn(dy[e], mean_dy)));
  }
}

template <bool kGrad>
void channel_sums(float* out, const float* a, const float* x, const float* mean, const float* invstd, int64_t n,
                  int64_t c, int64_t s, float count, double* scratch, cudaStream_t stream) {
  const int64_t m = n * s, chunks = channel_chunks(m), per = (m + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(c), static_cast<unsigned>(chunks));
  channel_partials_kernel<kGrad><<<grid, kThreads, 0, stream>>>(scratch, a, x, mean, invstd, c, s, m, per, chunks);
  TANDEM_CUDA_CHECK_LAUNCH(channel_partials_kernel);
  channel_finish_kernel<<<blocks_for(c), kThreads, 0, stream>>>(out, scratch, c, chunks, count);
  TANDEM_CUDA_CHECK_LAUNCH(channel_finish_kernel);
}

}  // namespace

size_t batchnorm_sums_scratch(int64_t n, int64_t c, int64_t s) {
  return static_cast<size_t>(2 * c * channel_chunks(n * s));
}

void batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s, double* scratch,
                     cudaStream_t stream) {
  if (c <= 0) return;
  channel_sums<false>(stats, x, nullptr, nullptr, nullptr, n, c, s, static_cast<float>(n * s), scratch, stream);
}

void batchnorm_train_moments(float* mean, float* invstd, float* running_mean, float* running_var,
                             int64_t* num_batches_tracked, const float* stats, int64_t c, float eps, float momentum,
                             cudaStream_t stream) {
  if (c <= 0) return;
  batchnorm_train_moments_kernel<<<blocks_for(c), kThreads, 0, stream>>>(mean, invstd, running_mean, running_var,
                                                                         num_batches_tracked, stats, c, eps,
                                                                         momentum);
  TANDEM_CUDA_CHECK_LAUNCH(batchnorm_train_moments_kernel);
}

void batchnorm_eval_invstd(float* invstd, const float* running_var, int64_t c, float eps, cudaStream_t stream) {
  if (c <= 0) return;
  batchnorm_eval_invstd_kernel<<<blocks_for(c), kThreads, 0, stream>>>(invstd, running_var, c, eps);
  TANDEM_CUDA_CHECK_LAUNCH(batchnorm_eval_invstd_kernel);
}

void batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd, const float* weight,
                       const float* bias, int64_t n, int64_t c, int64_t s, cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  batchnorm_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(y, x, mean, invstd, weight, bias, c, s, total);
  TANDEM_CUDA_CHECK_LAUNCH(batchnorm_forward_kernel);
}

void batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean, const float* invstd,
                             int64_t n, int64_t c, int64_t s, double* scratch, cudaStream_t stream) {
  if (c <= 0) return;
  channel_sums<true>(sums, dy, x, mean, invstd, n, c, s, -1.f, scratch, stream);
}

void batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean, const float* invstd,
                           const float* weight, const float* sums, const float* count, int64_t n, int64_t c, int64_t s,
                           cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  batchnorm_backward_dx_kernel<<<blocks_for(total), kThreads, 0, stream>>>(dx, dy, x, mean, invstd, weight, sums,
                                                                           count, c, s, total);
  TANDEM_CUDA_CHECK_LAUNCH(batchnorm_backward_dx_kernel);
}

}  // namespace tandem::cuda::launch
