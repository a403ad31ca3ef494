// Elementwise CUDA kernels: fill/scale/axpy/mul, bias adds, ReLU and GELU (forward and
// backward side by side), dropout, and f16/bf16 conversion.
// Invariant: each element is computed by the CPU kernel's formula (runtime/cpu/
// cpu_kernels.cpp) with the same operation order, so single-rounding ops (copies, bias
// adds, relu, mul, dropout, conversions) match the CPU bit for bit; erff/expf differ
// from glibc's by a few ulp (tests/gpu states the tolerance).
#include <cuda_fp16.h>

#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2*pi)

__global__ void fill_kernel(float* x, int64_t n, float value) {
  TANDEM_GRID_STRIDE_LOOP(i, n) x[i] = value;
}

__global__ void scale_kernel(float* x, int64_t n, float alpha) {
  TANDEM_GRID_STRIDE_LOOP(i, n) x[i] *= alpha;
}

__global__ void axpy_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n, float alpha) {
  TANDEM_GRID_STRIDE_LOOP(i, n) y[i] += alpha * x[i];
}

__global__ void mul_kernel(float* y, const float* a, const float* b, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) y[i] = a[i] * b[i];
}

// y (rows, cols) += bias (cols)
__global__ void add_bias_rows_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t rows,
                                     int64_t cols) {
  TANDEM_GRID_STRIDE_LOOP(i, rows * cols) y[i] += bias[i % cols];
}

// y (n, c, hw) += bias (c)
__global__ void add_bias_channels_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                         int64_t c, int64_t hw) {
  TANDEM_GRID_STRIDE_LOOP(i, n * c * hw) y[i] += bias[(i / hw) % c];
}

// --- ReLU ------------------------------------------------------------------------------
__global__ void relu_forward_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    y[i] = v < 0.f ? 0.f : v;  // NaN propagates, as PyTorch
  }
}

__global__ void relu_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                     const float* __restrict__ y, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

// --- GELU (exact erf form) -------------------------------------------------------------
__global__ void gelu_forward_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + erff(v * kInvSqrt2));
  }
}

__global__ void gelu_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                     const float* __restrict__ x, int64_t n) {
  // d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    const float cdf = 0.5f * (1.f + erff(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

// --- Dropout ---------------------------------------------------------------------------
// The i-th draw of a splitmix64 stream: the same arithmetic as cpu::splitmix64_at.
__device__ __forceinline__ uint64_t splitmix64_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void dropout_forward_kernel(float* __restrict__ y, float* __restrict__ mask, const float* __restrict__ x,
                                       int64_t n, float p, float keep_scale, uint64_t seed) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    // Top 24 bits -> [0,1) exactly (an integer below 2^24 times 2^-24), as on the CPU.
    const float u = static_cast<float>(splitmix64_at(seed, static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float m = u >= p ? keep_scale : 0.f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

// --- dtype conversion ------------------------------------------------------------------
__global__ void f32_to_f16_kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) dst[i] = __half_as_ushort(__float2half_rn(src[i]));  // round to nearest even
}

__global__ void f16_to_f32_kernel(float* __restrict__ dst, const uint16_t* __restrict__ src, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) dst[i] = __half2float(__ushort_as_half(src[i]));
}

__global__ void f32_to_bf16_kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  // The CPU kernel's integer rounding, so NaNs keep the same (quieted) payload bits too;
  // for every non-NaN it equals __float2bfloat16_rn.
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const uint32_t b = __float_as_uint(src[i]);
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (b >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

__global__ void bf16_to_f32_kernel(float* __restrict__ dst, const uint16_t* __restrict__ src, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

}  // namespace

#define TANDEM_LAUNCH_1D(kernel, n, stream, ...)                                 \
  do {                                                                         \
    if ((n) <= 0) return;                                                      \
    kernel<<<blocks_for(n), kThreads, 0, stream>>>(__VA_ARGS__);               \
    TANDEM_CUDA_CHECK_LAUNCH(kernel);                                          \
  } while (0)

void fill(float* x, int64_t n, float value, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(fill_kernel, n, stream, x, n, value);
}
void scale(float* x, int64_t n, float alpha, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(scale_kernel, n, stream, x, n, alpha);
}
void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(axpy_kernel, n, stream, y, x, n, alpha);
}
void mul(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(mul_kernel, n, stream, y, a, b, n);
}
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(add_bias_rows_kernel, rows * cols, stream, y, bias, rows, cols);
}
void add_bias_channels(float* y, const float* bias, int64_t n, int64_t c, int64_t hw, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(add_bias_channels_kernel, n * c * hw, stream, y, bias, n, c, hw);
}
void relu_forward(float* y, const float* x, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(relu_forward_kernel, n, stream, y, x, n);
}
void relu_backward(float* dx, const float* dy, const float* y, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(relu_backward_kernel, n, stream, dx, dy, y, n);
}
void gelu_forward(float* y, const float* x, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(gelu_forward_kernel, n, stream, y, x, n);
}
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(gelu_backward_kernel, n, stream, dx, dy, x, n);
}
void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p, float keep_scale, uint64_t seed,
                     cudaStream_t stream) {
  TANDEM_LAUNCH_1D(dropout_forward_kernel, n, stream, y, mask, x, n, p, keep_scale, seed);
}
void f32_to_f16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(f32_to_f16_kernel, n, stream, dst, src, n);
}
void f16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(f16_to_f32_kernel, n, stream, dst, src, n);
}
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(f32_to_bf16_kernel, n, stream, dst, src, n);
}
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream) {
  TANDEM_LAUNCH_1D(bf16_to_f32_kernel, n, stream, dst, src, n);
}

}  // namespace tandem::cuda::launch
