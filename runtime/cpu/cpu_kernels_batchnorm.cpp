// CPU kernels, part 5: batch normalisation (runtime/layers/batchnorm.h): the per-channel
// statistics, the moments and running-statistics update derived from them, the
// normalisation, and backward's per-channel sums and input gradient, side by side.
// Invariant: the per-channel sums accumulate in double (and are rounded to float once),
// the moments are derived in double, and the elementwise formulas are spelled with the
// same float operations, explicit FMAs included, as cuda/batchnorm.cu spells
// them, so that from the same statistics both devices compute the same bits.
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_kernels_impl.h"

TANDEM_CPU_ISA_BEGIN

namespace {

// Adds sum(a[j]) and sum(a[j] * b[j]) over a plane of s floats (b null: b = a) into
// acc[0] and acc[1], in double. Independent lanes, so GCC vectorises it.
inline void plane_sums(double* acc, const float* __restrict a, const float* __restrict b, int64_t s) {
  constexpr int L = 8;
  double s1[L] = {}, s2[L] = {};
  int64_t j = 0;
  if (b) {
    for (; j + L <= s; j += L)
      for (int k = 0; k < L; ++k) {
        s1[k] += static_cast<double>(a[j + k]);
        s2[k] += static_cast<double>(a[j + k]) * b[j + k];
      }
  } else {
    for (; j + L <= s; j += L)
      for (int k = 0; k < L; ++k) {
        const double v = a[j + k];
        s1[k] += v;
        s2[k] += v * v;  // exact: a float's square fits a double
      }
  }
  double t1 = 0, t2 = 0;
  for (; j < s; ++j) {
    const double v = a[j], w = b ? static_cast<double>(b[j]) : v;
    t1 += v;
    t2 += v * w;
  }
  for (int k = 0; k < L; ++k) {
    t1 += s1[k];
    t2 += s2[k];
  }
  acc[0] += t1;
  acc[1] += t2;
}

}  // namespace

// stats (2C + 1) <- x (N, C, S): [sum x, sum x^2, N*S]. Planes in memory order; each
// channel's two sums in a double pair.
void CpuKernels::batchnorm_stats(float* __restrict stats, const float* __restrict x, int64_t n, int64_t c,
                                 int64_t s) {
  std::vector<double> acc(static_cast<size_t>(2 * c), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) plane_sums(&acc[static_cast<size_t>(2 * ch)], x + (i * c + ch) * s, nullptr, s);
  for (int64_t ch = 0; ch < c; ++ch) {
    stats[ch] = static_cast<float>(acc[static_cast<size_t>(2 * ch)]);
    stats[c + ch] = static_cast<float>(acc[static_cast<size_t>(2 * ch + 1)]);
  }
  stats[2 * c] = static_cast<float>(n * s);
}

// mean, invstd (C) <- stats (2C + 1); running_mean, running_var (C) and
// num_batches_tracked updated in place. Every step in double, rounded to float at the end.
void CpuKernels::batchnorm_train_moments(float* __restrict mean, float* __restrict invstd,
                                         float* __restrict running_mean, float* __restrict running_var,
                                         int64_t* num_batches_tracked, const float* __restrict stats, int64_t c,
                                         float eps, float momentum) {
  const double count = stats[2 * c], m = momentum;
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = static_cast<double>(stats[ch]) / count;
    double var = std::fma(-mu, mu, static_cast<double>(stats[c + ch]) / count);
    var = var > 0.0 ? var : 0.0;  // rounding may leave a tiny negative for a constant channel
    mean[ch] = static_cast<float>(mu);
    invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    running_mean[ch] = static_cast<float>(std::fma(m, mu, (1.0 - m) * running_mean[ch]));
    running_var[ch] = static_cast<float>(std::fma(m, unbiased, (1.0 - m) * running_var[ch]));
  }
  *num_batches_tracked += 1;
}

void CpuKernels::batchnorm_eval_invstd(float* __restrict invstd, const float* __restrict running_var, int64_t c,
                                       float eps) {
  for (int64_t ch = 0; ch < c; ++ch)
    invstd[ch] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[ch]) + static_cast<double>(eps)));
}

// y = fma(x - mean, invstd * weight, bias), per channel's scale computed once.
void CpuKernels::batchnorm_forward(float* __restrict y, const float* __restrict x, const float* __restrict mean,
                                   const float* __restrict invstd, const float* __restrict weight,
                                   const float* __restrict bias, int64_t n, int64_t c, int64_t s) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float mu = mean[ch], a = weight ? invstd[ch] * weight[ch] : invstd[ch], b = bias ? bias[ch] : 0.f;
      const float* __restrict xp = x + (i * c + ch) * s;
      float* __restrict yp = y + (i * c + ch) * s;
      for (int64_t j = 0; j < s; ++j) yp[j] = std::fma(xp[j] - mu, a, b);
    }
}

// sums (2C) <- [sum dy, sum dy * xhat], xhat = (x - mean) * invstd rounded to float as
// batchnorm_backward_dx rounds it; the products and sums in double.
void CpuKernels::batchnorm_backward_sums(float* __restrict sums, const float* __restrict dy,
                                         const float* __restrict x, const float* __restrict mean,
                                         const float* __restrict invstd, int64_t n, int64_t c, int64_t s) {
  std::vector<double> acc(static_cast<size_t>(2 * c), 0.0);
  std::vector<float> xhat(static_cast<size_t>(s));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float mu = mean[ch], is = invstd[ch];
      const float* __restrict xp = x + (i * c + ch) * s;
      for (int64_t j = 0; j < s; ++j) xhat[static_cast<size_t>(j)] = (xp[j] - mu) * is;
      plane_sums(&acc[static_cast<size_t>(2 * ch)], dy + (i * c + ch) * s, xhat.data(), s);
    }
  for (int64_t ch = 0; ch < c; ++ch) {
    sums[ch] = static_cast<float>(acc[static_cast<size_t>(2 * ch)]);
    sums[c + ch] = static_cast<float>(acc[static_cast<size_t>(2 * ch + 1)]);
  }
}

// dx = (weight * invstd) * fma(-xhat, sum_dy_xhat / M, dy - sum_dy / M).
void CpuKernels::batchnorm_backward_dx(float* __restrict dx, const float* __restrict dy, const float* __restrict x,
                                       const float* __restrict mean, const float* __restrict invstd,
                                       const float* __restrict weight, const float* __restrict sums,
                                       const float* __restrict count, int64_t n, int64_t c, int64_t s) {
  const float m = count[0];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float mu = mean[ch], is = invstd[ch];
      const float k = weight ? weight[ch] * is : is;
      const float mean_dy = sums[ch] / m, mean_dy_xhat = sums[c + ch] / m;
      const float* __restrict xp = x + (i * c + ch) * s;
      const float* __restrict dyp = dy + (i * c + ch) * s;
      float* __restrict dxp = dx + (i * c + ch) * s;
      for (int64_t j = 0; j < s; ++j) {
        const float xhat = (xp[j] - mu) * is;
        dxp[j] = k * std::fma(-xhat, mean_dy_xhat, dyp[j] - mean_dy);
      }
    }
}

TANDEM_CPU_ISA_END
