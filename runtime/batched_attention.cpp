// Attention over the Kernels primitives; the layout of each step is in batched_attention.h.
#include "runtime/batched_attention.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/kernels.h"

namespace tandem {

namespace {

void check_heads(int64_t c, int64_t nh) {
  if (nh <= 0 || c <= 0 || c % nh != 0)
    throw std::invalid_argument("attention: C = " + std::to_string(c) + " is not a positive multiple of NH = " +
                                std::to_string(nh));
}

}  // namespace

size_t batched_attention_scratch(int64_t b, int64_t t, int64_t c, bool backward) {
  return static_cast<size_t>((backward ? 6 : 3) * b * t * c);
}

void batched_attention_forward(Kernels& k, float* out, float* att, const float* qkv, float* scratch, int64_t b,
                               int64_t t, int64_t c, int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const int64_t hs = c / nh, btc = b * t * c, heads = b * nh, mat = t * hs, sq = t * t;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  float* q = scratch;  // (3, B, NH, T, HS): q, k, v
  const float* key = q + btc;
  const float* v = q + 2 * btc;
  k.split_heads(q, qkv, 3, b, t, c, nh);
  k.gemm_strided_batched(att, q, key, t, t, hs, false, true, scale, 0.f, heads, mat, mat, sq);  // (T, T) per head
  k.causal_softmax_forward(att, heads * t, t);
  float* y = q;  // q is spent: y (B, NH, T, HS) takes its place
  k.gemm_strided_batched(y, att, v, t, hs, t, false, false, 1.f, 0.f, heads, sq, mat, mat);
  k.merge_heads(out, y, 1, b, t, c, nh);
}

void batched_attention_backward(Kernels& k, float* dqkv, float* datt, const float* dout, const float* qkv,
                                const float* att, float* scratch, int64_t b, int64_t t, int64_t c, int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const int64_t hs = c / nh, btc = b * t * c, heads = b * nh, mat = t * hs, sq = t * t;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const float* q = scratch;  // (3, B, NH, T, HS)
  const float* key = q + btc;
  const float* v = q + 2 * btc;
  float* dq = scratch + 3 * btc;  // (3, B, NH, T, HS): dq, dk, dv; dy waits in dq's place
  float* dk = dq + btc;
  float* dv = dq + 2 * btc;
  const float* dy = dq;
  k.split_heads(scratch, qkv, 3, b, t, c, nh);
  k.split_heads(dq, dout, 1, b, t, c, nh);
  k.gemm_strided_batched(datt, dy, v, t, t, hs, false, true, 1.f, 0.f, heads, mat, mat, sq);   // dy v^T
  k.gemm_strided_batched(dv, att, dy, t, hs, t, true, false, 1.f, 0.f, heads, sq, mat, mat);   // att^T dy
  k.causal_softmax_backward(datt, att, heads * t, t);                                          // dpre
  k.gemm_strided_batched(dq, datt, key, t, hs, t, false, false, scale, 0.f, heads, sq, mat, mat);  // dy is spent
  k.gemm_strided_batched(dk, datt, q, t, hs, t, true, false, scale, 0.f, heads, sq, mat, mat);
  k.merge_heads(dqkv, dq, 3, b, t, c, nh);
}

}  // namespace tandem
