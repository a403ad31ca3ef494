// CPU kernels, part 4: the regression losses, mean squared error and binary cross-entropy
// with logits, forward (one loss per row) and backward side by side.
// Invariant: a row's loss is the mean of its element terms, summed in double (each term
// rounded to float as the CUDA kernel rounds it), so the mean over rows of losses equals
// torch's mean reduction to float rounding; backward's formula is spelled exactly as
// cuda/norm_loss.cu spells it (the same float operations in the same order).
#include <cmath>

#include "runtime/cpu/cpu_kernels_impl.h"

TANDEM_CPU_ISA_BEGIN

namespace {

// max(x, 0) - x*t + log1p(exp(-|x|)): torch's BCEWithLogitsLoss term, finite for any
// finite logit (exp never overflows, and log1p keeps the tail where exp(-|x|) < 2^-24).
// The fused multiply-add is written out so that no compiler's contraction choice differs
// from the CUDA kernel's.
inline float bce_term(float x, float t) {
  const float hinge = x > 0.f ? x : 0.f;
  return std::fma(-x, t, hinge) + std::log1p(std::exp(-std::fabs(x)));
}

// 1 / (1 + exp(-x)) without overflow: exp of a non-positive argument only.
inline float sigmoid(float x) {
  if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.f + e);
}

}  // namespace

void CpuKernels::mse_forward(float* __restrict losses, const float* __restrict pred,
                             const float* __restrict target, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict pr = pred + r * cols;
    const float* __restrict tr = target + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = pr[c] - tr[c];  // float difference; its square is exact in double
      s += d * d;
    }
    losses[r] = static_cast<float>(s / static_cast<double>(cols));
  }
}

void CpuKernels::mse_backward(float* __restrict dpred, const float* __restrict pred,
                              const float* __restrict target, int64_t rows, int64_t cols, float scale) {
  const float fcols = static_cast<float>(cols);
  for (int64_t i = 0; i < rows * cols; ++i) dpred[i] = scale * 2.f * (pred[i] - target[i]) / fcols;
}

void CpuKernels::bce_logits_forward(float* __restrict losses, const float* __restrict logits,
                                    const float* __restrict target, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = logits + r * cols;
    const float* __restrict tr = target + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += bce_term(xr[c], tr[c]);
    losses[r] = static_cast<float>(s / static_cast<double>(cols));
  }
}

void CpuKernels::bce_logits_backward(float* __restrict dlogits, const float* __restrict logits,
                                     const float* __restrict target, int64_t rows, int64_t cols, float scale) {
  const float fcols = static_cast<float>(cols);
  for (int64_t i = 0; i < rows * cols; ++i) dlogits[i] = scale * (sigmoid(logits[i]) - target[i]) / fcols;
}

TANDEM_CPU_ISA_END
