// CPU kernels, part 2: im2col/col2im (per image and batched), swap_leading, max pooling,
// layer norm, softmax cross-entropy, and the fused SGD/AdamW updates (part 1,
// cpu_kernels.cpp, holds gemm and elementwise).
// Invariant: col2im(_batched)_acc is the exact adjoint of im2col(_batched) (the same
// index map, read vs add; the single-image forms are the batch of one), maxpool's argmax
// is the flat h*W+w index inside its plane with the first maximum winning, and the
// optimizers reproduce PyTorch 1.13's single-tensor arithmetic.
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/cpu/cpu_kernels_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // used only inside the avx2 and avx512 regions
#endif

TANDEM_CPU_ISA_BEGIN

namespace {

// The output positions o in [0, out) whose input index o*stride - pad + offset lies
// in [0, in): a contiguous range [lo, hi), possibly empty.
struct ValidRange {
  int64_t lo, hi;
};

ValidRange valid_outputs(int64_t in, int64_t out, int64_t stride, int64_t pad, int64_t offset) {
  const int64_t first = pad - offset;  // smallest o*stride that is in range
  int64_t lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t limit = in + pad - offset;  // o*stride must stay below this
  int64_t hi = limit <= 0 ? 0 : (limit - 1) / stride + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

}  // namespace

// --- convolution and pooling -----------------------------------------------------
// col row (ch, ki, kj), column (i, oy, ox) holds img[i, ch, oy*s-pad+ki, ox*s-pad+kj]
// (or 0); one image is the batch of one. Image-major loops keep an image's planes in
// cache while its k*k rows are written (or read back, for col2im).

void CpuKernels::im2col_batched(float* __restrict col, const float* __restrict img, int64_t n, int64_t c,
                                int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                                int64_t oh, int64_t ow) {
  const int64_t ohw = oh * ow, row_len = n * ohw;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* __restrict plane = img + (i * c + ch) * h * w;
      for (int64_t ki = 0; ki < kh; ++ki) {
        const ValidRange ys = valid_outputs(h, oh, stride, pad, ki);
        for (int64_t kj = 0; kj < kw; ++kj) {
          const ValidRange xs = valid_outputs(w, ow, stride, pad, kj);
          float* __restrict block = col + ((ch * kh + ki) * kw + kj) * row_len + i * ohw;
          for (int64_t oy = 0; oy < oh; ++oy) {
            float* __restrict out = block + oy * ow;
            if (oy < ys.lo || oy >= ys.hi || xs.lo == xs.hi) {
              for (int64_t ox = 0; ox < ow; ++ox) out[ox] = 0.f;
              continue;
            }
            // plane[base + ox*stride] is the source of column ox (in range for ox in xs).
            const int64_t base = (oy * stride - pad + ki) * w - pad + kj;
            for (int64_t ox = 0; ox < xs.lo; ++ox) out[ox] = 0.f;
            if (stride == 1) {
              // A plain loop, not memcpy: rows are short (OW floats) and the call would dominate.
              const float* __restrict src = plane + base;
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) out[ox] = src[ox];
            } else {
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) out[ox] = plane[base + ox * stride];
            }
            for (int64_t ox = xs.hi; ox < ow; ++ox) out[ox] = 0.f;
          }
        }
      }
    }
}

void CpuKernels::col2im_batched_acc(float* __restrict img, const float* __restrict col, int64_t n, int64_t c,
                                    int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                                    int64_t oh, int64_t ow) {
  const int64_t ohw = oh * ow, row_len = n * ohw;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      float* __restrict plane = img + (i * c + ch) * h * w;
      for (int64_t ki = 0; ki < kh; ++ki) {
        const ValidRange ys = valid_outputs(h, oh, stride, pad, ki);
        for (int64_t kj = 0; kj < kw; ++kj) {
          const ValidRange xs = valid_outputs(w, ow, stride, pad, kj);
          const float* __restrict block = col + ((ch * kh + ki) * kw + kj) * row_len + i * ohw;
          for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
            const float* __restrict src = block + oy * ow;
            const int64_t base = (oy * stride - pad + ki) * w - pad + kj;
            if (stride == 1) {
              float* __restrict dst = plane + base + xs.lo;
              for (int64_t ox = 0; ox < xs.hi - xs.lo; ++ox) dst[ox] += src[xs.lo + ox];
            } else {
              for (int64_t ox = xs.lo; ox < xs.hi; ++ox) plane[base + ox * stride] += src[ox];
            }
          }
        }
      }
    }
}

void CpuKernels::swap_leading(float* __restrict dst, const float* __restrict src, int64_t a, int64_t b,
                              int64_t inner) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) {
      const float* __restrict s = src + (i * b + j) * inner;
      float* __restrict d = dst + (j * a + i) * inner;
      for (int64_t k = 0; k < inner; ++k) d[k] = s[k];
    }
}

namespace {

// One plane; K > 0 fixes the window size at compile time (fully unrolled), K == 0 reads k.
template <int K>
void maxpool_plane(float* __restrict y, int32_t* __restrict argmax, const float* __restrict plane,
                   int64_t w, int64_t k_runtime, int64_t stride, int64_t oh, int64_t ow) {
  const int64_t k = K > 0 ? K : k_runtime;
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t origin = oy * stride * w + ox * stride;
      float best = plane[origin];
      int64_t best_idx = origin;
      for (int64_t ki = 0; ki < k; ++ki)
        for (int64_t kj = 0; kj < k; ++kj) {
          const int64_t idx = origin + ki * w + kj;
          const float v = plane[idx];
          // Strictly greater: the first maximum wins. A NaN wins (once) and propagates, as
          // in PyTorch. Branch-free selects: the comparisons are data-dependent coin flips.
          const bool take = v > best || (v != v && best == best);
          best = take ? v : best;
          best_idx = take ? idx : best_idx;
        }
      y[oy * ow + ox] = best;
      argmax[oy * ow + ox] = static_cast<int32_t>(best_idx);
    }
}

}  // namespace

void CpuKernels::maxpool_forward(float* __restrict y, int32_t* __restrict argmax,
                                 const float* __restrict x, int64_t planes, int64_t h, int64_t w,
                                 int64_t k, int64_t stride, int64_t oh, int64_t ow) {
  if (h * w > INT32_MAX) throw std::invalid_argument("maxpool_forward: plane too large for i32 argmax");
  for (int64_t p = 0; p < planes; ++p) {
    float* yp = y + p * oh * ow;
    int32_t* ap = argmax + p * oh * ow;
    const float* xp = x + p * h * w;
    if (k == 2)
      maxpool_plane<2>(yp, ap, xp, w, k, stride, oh, ow);
    else if (k == 3)
      maxpool_plane<3>(yp, ap, xp, w, k, stride, oh, ow);
    else
      maxpool_plane<0>(yp, ap, xp, w, k, stride, oh, ow);
  }
}

void CpuKernels::maxpool_backward(float* __restrict dx, const float* __restrict dy,
                                  const int32_t* __restrict argmax, int64_t planes, int64_t h, int64_t w,
                                  int64_t oh, int64_t ow) {
  fill(dx, planes * h * w, 0.f);
  // += because overlapping windows (stride < k) can share a maximum.
  for (int64_t p = 0; p < planes; ++p) {
    float* __restrict plane = dx + p * h * w;
    const int64_t base = p * oh * ow;
    for (int64_t o = 0; o < oh * ow; ++o) plane[argmax[base + o]] += dy[base + o];
  }
}

// --- normalisation and loss --------------------------------------------------------

void CpuKernels::layernorm_forward(float* __restrict y, float* __restrict mean, float* __restrict rstd,
                                   const float* __restrict x, const float* __restrict gamma,
                                   const float* __restrict beta, int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * cols;
    float* __restrict yr = y + r * cols;
    const float mu = lane_sum(xr, cols) * inv_cols;
    // Two passes (mean, then squared deviations): no cancellation for large means.
    // yr is scratch for the deviations; it is overwritten below.
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * (xr[c] - mu);
    const float var = lane_sum(yr, cols) * inv_cols;  // biased, as PyTorch
    const float rs = 1.f / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void CpuKernels::layernorm_backward(float* __restrict dx, float* __restrict dgamma,
                                    float* __restrict dbeta, const float* __restrict dy,
                                    const float* __restrict x, const float* __restrict gamma,
                                    const float* __restrict mean, const float* __restrict rstd,
                                    int64_t rows, int64_t cols) {
  // With xhat = (x-mean)*rstd and g = dy*gamma:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * cols;
    const float* __restrict dyr = dy + r * cols;
    float* __restrict dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    // dxr holds g*xhat as scratch so both row sums can use the vectorised lane_sum.
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - mu) * rs;
      dgamma[c] += dyr[c] * xhat;
      dbeta[c] += dyr[c];
      dxr[c] = dyr[c] * gamma[c] * xhat;
    }
    const float mean_gx = lane_sum(dxr, cols) * inv_cols;
    for (int64_t c = 0; c < cols; ++c) dxr[c] = dyr[c] * gamma[c];
    const float mean_g = lane_sum(dxr, cols) * inv_cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] = rs * (dxr[c] - mean_g - xhat * mean_gx);
    }
  }
}

void CpuKernels::softmax_xent_forward(float* __restrict probs, float* __restrict losses,
                                      const float* __restrict logits, const int32_t* __restrict labels,
                                      int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = labels[r];
    if (label < 0 || label >= classes)
      throw std::invalid_argument("softmax_xent_forward: label " + std::to_string(label) + " in row " +
                                  std::to_string(r) + " is outside [0, " + std::to_string(classes) +
                                  ")");
    const float* __restrict lr = logits + r * classes;
    float* __restrict pr = probs + r * classes;
    float mx = lr[0];
    for (int64_t c = 1; c < classes; ++c) mx = lr[c] > mx ? lr[c] : mx;
    // Subtracting the max keeps exp() in (0, 1]: no overflow, and the sum is >= 1.
    for (int64_t c = 0; c < classes; ++c) pr[c] = std::exp(lr[c] - mx);
    const float s = lane_sum(pr, classes);
    const float inv = 1.f / s;
    for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
    // -log softmax = log(sum) - (z - max): exact even where the probability underflows.
    losses[r] = std::log(s) - (lr[label] - mx);
  }
}

void CpuKernels::softmax_xent_backward(float* __restrict dlogits, const float* __restrict probs,
                                       const int32_t* __restrict labels, int64_t rows, int64_t classes,
                                       float scale) {
  for (int64_t i = 0; i < rows * classes; ++i) dlogits[i] = probs[i] * scale;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r * classes + labels[r];
    dlogits[i] = (probs[i] - 1.f) * scale;
  }
}

int64_t CpuKernels::count_correct(const float* __restrict logits, const int32_t* __restrict labels,
                                  int64_t rows, int64_t classes) {
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict lr = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (lr[c] > lr[best]) best = c;  // strictly greater: the first maximum wins
    correct += best == labels[r];
  }
  return correct;
}

// --- optimizers --------------------------------------------------------------------

void CpuKernels::sgd_update(float* __restrict param, float* __restrict momentum_buf,
                            const float* __restrict grad, int64_t n, float lr, float momentum,
                            float weight_decay, bool nesterov, bool first_step) {
  // torch.optim.SGD (dampening 0): the branches are loop-invariant, so GCC unswitches them.
  if (momentum == 0.f) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = weight_decay != 0.f ? grad[i] + weight_decay * param[i] : grad[i];
      param[i] += -lr * g;
    }
    return;
  }
  if (momentum_buf == nullptr) throw std::invalid_argument("sgd_update: momentum != 0 needs a buffer");
  for (int64_t i = 0; i < n; ++i) {
    const float g = weight_decay != 0.f ? grad[i] + weight_decay * param[i] : grad[i];
    const float buf = first_step ? g : momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    const float step = nesterov ? g + momentum * buf : buf;
    param[i] += -lr * step;
  }
}

void CpuKernels::adamw_update(float* __restrict param, float* __restrict m, float* __restrict v,
                              const float* __restrict grad, int64_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int64_t step) {
  if (step < 1)
    throw std::invalid_argument("adamw_update: step counts from 1, got " + std::to_string(step));
  // torch.optim.AdamW's single-tensor path: the bias corrections are Python doubles,
  // rounded to float where they meet the tensors.
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = std::fma(-lr, weight_decay, 1.f);  // fused, as GCC contracts it; CUDA matches
#if TANDEM_CPU_ISA_LEVEL >= 1
  // GCC will not vectorise sqrtf while it may set errno, so the body is spelled out. The
  // tail goes through the same instructions under a mask, so every element gets
  // bit-identical results wherever it sits in the tensor (a DDP bucket view or not).
  // The three fused multiply-adds are written out rather than left to -ffp-contract, so
  // every compiler rounds alike and cuda/optim.cu can match them bit for bit.
  const __m256 v_decay = _mm256_set1_ps(decay), v_b1 = _mm256_set1_ps(beta1),
               v_b2 = _mm256_set1_ps(beta2);
  const __m256 v_1b1 = _mm256_set1_ps(1.f - beta1), v_1b2 = _mm256_set1_ps(1.f - beta2);
  const __m256 v_bc2 = _mm256_set1_ps(bc2_sqrt), v_eps = _mm256_set1_ps(eps),
               v_step = _mm256_set1_ps(step_size);
  for (int64_t i = 0; i < n; i += 8) {
    const int lanes = n - i < 8 ? static_cast<int>(n - i) : 8;
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 g = _mm256_maskload_ps(grad + i, mask);
    const __m256 mi = _mm256_fmadd_ps(v_1b1, g, _mm256_mul_ps(v_b1, _mm256_maskload_ps(m + i, mask)));
    const __m256 vi =
        _mm256_fmadd_ps(_mm256_mul_ps(v_1b2, g), g, _mm256_mul_ps(v_b2, _mm256_maskload_ps(v + i, mask)));
    _mm256_maskstore_ps(m + i, mask, mi);
    _mm256_maskstore_ps(v + i, mask, vi);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), v_bc2), v_eps);
    // param * decay - update: the decoupled decay, fused into the step.
    _mm256_maskstore_ps(param + i, mask,
                        _mm256_fmsub_ps(_mm256_maskload_ps(param + i, mask), v_decay,
                                        _mm256_div_ps(_mm256_mul_ps(v_step, mi), denom)));
  }
#else
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = std::fma(1.f - beta1, g, beta1 * m[i]);
    const float vi = std::fma((1.f - beta2) * g, g, beta2 * v[i]);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    param[i] = std::fma(param[i], decay, -(step_size * mi / denom));
  }
#endif
}

TANDEM_CPU_ISA_END
