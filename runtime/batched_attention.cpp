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

// The floats of scratch that n bf16 elements take, in whole 64-byte lines, so that the
// region after them starts aligned as an allocation does.
int64_t half_floats(int64_t n) { return (n + 31) / 32 * 16; }

}  // namespace

size_t batched_attention_scratch(int64_t b, int64_t t, int64_t c, int64_t nh, bool backward, Precision precision) {
  const int64_t btc = b * t * c;
  int64_t floats = (backward ? 6 : 3) * btc;
  if (precision == Precision::bf16) floats += half_floats((backward ? 4 : 3) * btc) + half_floats(b * nh * t * t);
  return static_cast<size_t>(floats);
}

void batched_attention_forward(Kernels& k, float* out, float* att, const float* qkv, float* scratch, int64_t b,
                               int64_t t, int64_t c, int64_t nh, Precision precision) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const int64_t hs = c / nh, btc = b * t * c, heads = b * nh, mat = t * hs, sq = t * t;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  float* q = scratch;  // (3, B, NH, T, HS): q, k, v
  const float* key = q + btc;
  const float* v = q + 2 * btc;
  k.split_heads(q, qkv, 3, b, t, c, nh);
  float* y = q;  // once q is spent: y (B, NH, T, HS) takes its place
  if (precision == Precision::bf16) {
    auto* q16 = reinterpret_cast<uint16_t*>(scratch + 3 * btc);  // (3, B, NH, T, HS)
    const uint16_t* k16 = q16 + btc;
    const uint16_t* v16 = q16 + 2 * btc;
    auto* att16 = reinterpret_cast<uint16_t*>(scratch + 3 * btc + half_floats(3 * btc));
    k.f32_to_bf16(q16, q, 3 * btc);
    k.gemm_strided_batched_bf16(att, q16, k16, t, t, hs, false, true, scale, 0.f, heads, mat, mat, sq);
    k.causal_softmax_forward(att, heads * t, t);
    k.f32_to_bf16(att16, att, heads * sq);
    k.gemm_strided_batched_bf16(y, att16, v16, t, hs, t, false, false, 1.f, 0.f, heads, sq, mat, mat);
  } else {
    k.gemm_strided_batched(att, q, key, t, t, hs, false, true, scale, 0.f, heads, mat, mat, sq);  // (T, T) per head
    k.causal_softmax_forward(att, heads * t, t);
    k.gemm_strided_batched(y, att, v, t, hs, t, false, false, 1.f, 0.f, heads, sq, mat, mat);
  }
  k.merge_heads(out, y, 1, b, t, c, nh);
}

void batched_attention_backward(Kernels& k, float* dqkv, float* datt, const float* dout, const float* qkv,
                                const float* att, float* scratch, int64_t b, int64_t t, int64_t c, int64_t nh,
                                Precision precision) {
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
  if (precision == Precision::bf16) {
    auto* q16 = reinterpret_cast<uint16_t*>(scratch + 6 * btc);  // (4, B, NH, T, HS): q, k, v, dy
    const uint16_t* k16 = q16 + btc;
    const uint16_t* v16 = q16 + 2 * btc;
    uint16_t* dy16 = q16 + 3 * btc;
    auto* att16 = reinterpret_cast<uint16_t*>(scratch + 6 * btc + half_floats(4 * btc));  // att's, then dpre's
    k.f32_to_bf16(q16, q, 3 * btc);
    k.f32_to_bf16(dy16, dy, btc);
    k.f32_to_bf16(att16, att, heads * sq);
    k.gemm_strided_batched_bf16(datt, dy16, v16, t, t, hs, false, true, 1.f, 0.f, heads, mat, mat, sq);  // dy v^T
    k.gemm_strided_batched_bf16(dv, att16, dy16, t, hs, t, true, false, 1.f, 0.f, heads, sq, mat, mat);  // att^T dy
    k.causal_softmax_backward(datt, att, heads * t, t);                                                  // dpre
    k.f32_to_bf16(att16, datt, heads * sq);
    k.gemm_strided_batched_bf16(dq, att16, k16, t, hs, t, false, false, scale, 0.f, heads, sq, mat, mat);
    k.gemm_strided_batched_bf16(dk, att16, q16, t, hs, t, true, false, scale, 0.f, heads, sq, mat, mat);
  } else {
    k.gemm_strided_batched(datt, dy, v, t, t, hs, false, true, 1.f, 0.f, heads, mat, mat, sq);   // dy v^T
    k.gemm_strided_batched(dv, att, dy, t, hs, t, true, false, 1.f, 0.f, heads, sq, mat, mat);   // att^T dy
    k.causal_softmax_backward(datt, att, heads * t, t);                                          // dpre
    k.gemm_strided_batched(dq, datt, key, t, hs, t, false, false, scale, 0.f, heads, sq, mat, mat);  // dy is spent
    k.gemm_strided_batched(dk, datt, q, t, hs, t, true, false, scale, 0.f, heads, sq, mat, mat);
  }
  k.merge_heads(dqkv, dq, 3, b, t, c, nh);
}

}  // namespace tandem
