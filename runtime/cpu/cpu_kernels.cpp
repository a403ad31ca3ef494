// CPU kernels, part 1: OpenBLAS sgemm, elementwise loops, reductions and dtype
// conversion, compiled once per instruction-set level (cpu_isa.h). Part 2
// (cpu_kernels_nn.cpp) holds the convolution, pooling, normalisation, loss and optimizer
// kernels; cpu_isa.cpp chooses the level and owns the process-wide BLAS thread count.
// Invariant: each kernel makes one pass over its large operands, is written so that GCC
// vectorises it at -O3 for any level without -ffast-math or contraction (restrict
// pointers, no loop-carried float dependence: reductions use independent lanes), so every
// level computes the same bits; and never reads an output it is told to overwrite (so
// fresh, uninitialised buffers are valid outputs).
#include <cblas.h>
#include <fp16.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/cpu_kernels_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // used only inside the avx2 and avx512 regions
#endif

TANDEM_CPU_ISA_BEGIN

Kernels& instance() {
  static CpuKernels kernels;  // stateless, so sharing one instance is safe
  return kernels;
}

namespace {

blasint blas_dim(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " is outside the BLAS integer range");
  return static_cast<blasint>(v);
}

inline uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float f32_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace

// --- dense algebra -----------------------------------------------------------------

void CpuKernels::gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                           bool trans_a, bool trans_b, float alpha, float beta) {
  cpu::gemm_bf16(bf16_gemm_path(), C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
}

void CpuKernels::gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                      bool trans_a, bool trans_b, float alpha, float beta) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS rejects a zero leading dimension; the product is empty, C = beta*C
    if (beta == 0.f)
      fill(C, M * N, 0.f);
    else if (beta != 1.f)
      scale(C, M * N, beta);
    return;
  }
  const blasint m = blas_dim(M, "M"), n = blas_dim(N, "N"), k = blas_dim(K, "K");
  // Row-major: op(A) is (M,K), so A itself is (K,M) when transposed; likewise B.
  const blasint lda = trans_a ? m : k;
  const blasint ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, A, lda, B, ldb, beta, C, n);
}

// --- elementwise -------------------------------------------------------------------

void CpuKernels::fill(float* __restrict x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void CpuKernels::copy(float* dst, const float* src, int64_t n) {
  if (dst != src && n > 0) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void CpuKernels::scale(float* __restrict x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuKernels::axpy(float* __restrict y, const float* __restrict x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuKernels::add_bias_rows(float* __restrict y, const float* __restrict bias, int64_t rows,
                               int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += bias[c];
  }
}

void CpuKernels::sum_rows_acc(float* __restrict out, const float* __restrict x, int64_t rows,
                              int64_t cols) {
  // Row by row keeps `out` hot in L1 and the inner loop contiguous and vectorised.
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] += xr[c];
  }
}

void CpuKernels::add_bias_channels(float* __restrict y, const float* __restrict bias, int64_t n,
                                   int64_t c, int64_t hw) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      float* __restrict plane = y + (i * c + ch) * hw;
      const float b = bias[ch];
      for (int64_t j = 0; j < hw; ++j) plane[j] += b;
    }
}

void CpuKernels::sum_channels_acc(float* __restrict out, const float* __restrict x, int64_t n, int64_t c,
                                  int64_t hw) {
  for (int64_t ch = 0; ch < c; ++ch) {
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) s += lane_sum(x + (i * c + ch) * hw, hw);
    out[ch] += s;
  }
}

void CpuKernels::relu_forward(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.f ? 0.f : x[i];  // NaN propagates, as PyTorch
}

void CpuKernels::relu_backward(float* __restrict dx, const float* __restrict dy,
                               const float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2*pi)
}  // namespace

void CpuKernels::gelu_forward(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
}

void CpuKernels::gelu_backward(float* __restrict dx, const float* __restrict dy,
                               const float* __restrict x, int64_t n) {
  // d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.f + std::erf(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

void CpuKernels::dropout_forward(float* __restrict y, float* __restrict mask, const float* __restrict x,
                                 int64_t n, float p, uint64_t seed) {
  // u = top 24 bits of the i-th splitmix64 draw, exactly representable in [0,1); keep
  // when u >= p, so P(keep) = 1-p up to 2^-24. p == 1 drops everything (no inf scale).
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float u =
        static_cast<float>(splitmix64_at(seed, static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float m = u >= p ? keep_scale : 0.f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

void CpuKernels::mul(float* __restrict y, const float* __restrict a, const float* __restrict b,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

double CpuKernels::sum(const float* __restrict x, int64_t n) {
  constexpr int L = 8;
  double acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int k = 0; k < L; ++k) acc[k] += static_cast<double>(x[i + k]);
  double s = 0.0;
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  for (int k = 0; k < L; ++k) s += acc[k];
  return s;
}

// --- dtype conversion --------------------------------------------------------------

void CpuKernels::f32_to_f16(uint16_t* __restrict dst, const float* __restrict src, int64_t n) {
  int64_t i = 0;
#if TANDEM_CPU_ISA_LEVEL >= 1
  // The hardware conversion rounds to nearest even like fp16.h; it differs only in the
  // payload bits of a NaN (still a NaN), which carry no meaning here.
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = fp16_ieee_from_fp32_value(src[i]);
}

void CpuKernels::f16_to_f32(float* __restrict dst, const uint16_t* __restrict src, int64_t n) {
  int64_t i = 0;
#if TANDEM_CPU_ISA_LEVEL >= 1
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_ieee_to_fp32_value(src[i]);
}

void CpuKernels::f32_to_bf16(uint16_t* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = f32_bits(src[i]);
    // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. A NaN
    // would round into inf (or wrap its sign), so it is truncated with the quiet bit set.
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (b >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void CpuKernels::bf16_to_f32(float* __restrict dst, const uint16_t* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bits(static_cast<uint32_t>(src[i]) << 16);
}

TANDEM_CPU_ISA_END
