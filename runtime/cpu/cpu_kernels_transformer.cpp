// CPU kernels, part 3: the transformer's own operations (token embedding, causal
// self-attention over a fused qkv projection, GELU with the tanh approximation, and
// clipping by global gradient norm). They run single-threaded inside a small GPT step, so
// they avoid temporaries and reach OpenBLAS directly on strided views of qkv.
// Invariant: attention's att has exact zeros above the diagonal, every attention row sums
// to 1 over its causal prefix, embedding_backward_acc adds each table row's contributions
// in increasing n, and the elementwise loops stay free of libm calls so GCC vectorises
// them at -O3 for every level of cpu_isa.h (no -ffast-math).
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_kernels_impl.h"

TANDEM_CPU_ISA_BEGIN

namespace {

blasint blas_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("attention: ") + what + " = " + std::to_string(v) +
                                " is outside the BLAS integer range");
  return static_cast<blasint>(v);
}

// cond ? a : b. GCC 12 (with the default -ftrapping-math) will not if-convert a float
// select whose result feeds more arithmetic, which leaves the whole loop scalar; a
// select between integer constants is fine, so the mask is built that way and the floats
// are blended through their bits.
inline float select(bool cond, float a, float b) {
  const int32_t m = cond ? -1 : 0;
  return std::bit_cast<float>((std::bit_cast<int32_t>(a) & m) | (std::bit_cast<int32_t>(b) & ~m));
}

// e^x for x in [-87.3, 88.3] (clamped outside, so e^-inf is ~1e-38, not 0; NaN stays NaN),
// about 2 ulp (Cephes expf): n = round(x / ln 2), r = x - n ln 2 in two parts, a degree-6
// polynomial for e^r, and 2^n built in the exponent bits. libm's expf, and even
// std::floor under the default -ftrapping-math, would keep these loops scalar without
// -ffast-math; so n is rounded by adding and subtracting 1.5 * 2^23 (which also leaves
// n in the low mantissa bits of the sum), and the whole body inlines into AVX2 code.
inline float exp_vec(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  x = select(x < -87.3f, -87.3f, x);
  x = select(x > 88.3f, 88.3f, x);
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // n in [-126, 127] is the low mantissa bits of `shifted`: 2^n is a normal float.
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  return p * std::bit_cast<float>((ni + 127) << 23);
}

// Attention's products run in row blocks of this many queries, each against only the keys
// it can see: at T = 64 that skips a quarter of the square, and measured faster than 16
// (more, smaller calls) or the whole square.
constexpr blasint kRowBlock = 32;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;

// Softmax of row[0..len) (len >= 1), max-subtracted; the row's tail [len, t) becomes 0.
// The work runs in `buf` (at least len rounded up to 8 floats), padded with -inf, so the
// exp loop is whole 8-float blocks that GCC turns into AVX2 code without a scalar tail:
// the rows are short (len <= T = 64 in the small GPT), and the tails cost more than the
// exps did. (The max stays scalar: GCC vectorises a float max only with -ffinite-math-only.)
// A pad's e^-87.3 ~ 1e-38 added to a sum >= 1 (the maximum's own term) changes nothing.
inline void causal_softmax_row(float* __restrict row, int64_t len, int64_t t, float* __restrict buf) {
  constexpr int L = 8;
  const int64_t padded = (len + L - 1) / L * L;
  int64_t j = 0;
  for (; j < len; ++j) buf[j] = row[j];
  for (; j < padded; ++j) buf[j] = -INFINITY;
  float lane[L];
  for (int k = 0; k < L; ++k) lane[k] = buf[k];
  for (j = L; j < padded; j += L)
    for (int k = 0; k < L; ++k) lane[k] = select(buf[j + k] > lane[k], buf[j + k], lane[k]);
  float mx = lane[0];
  for (int k = 1; k < L; ++k) mx = select(lane[k] > mx, lane[k], mx);
  float acc[L] = {};
  for (j = 0; j < padded; j += L)
    for (int k = 0; k < L; ++k) {
      const float e = exp_vec(buf[j + k] - mx);
      buf[j + k] = e;
      acc[k] += e;
    }
  float sum = 0.f;
  for (int k = 0; k < L; ++k) sum += acc[k];
  const float inv = 1.f / sum;
  for (j = 0; j < len; ++j) row[j] = buf[j] * inv;
  for (; j < t; ++j) row[j] = 0.f;
}

// dpre = att * (datt - sum_j datt*att) over the causal prefix, in place in datt; 0 past it.
inline void softmax_backward_row(float* __restrict drow, const float* __restrict arow, int64_t len,
                                 int64_t t) {
  constexpr int L = 8;
  float acc[L] = {};
  int64_t j = 0;
  for (; j + L <= len; j += L)
    for (int k = 0; k < L; ++k) acc[k] += drow[j + k] * arow[j + k];
  float dot = 0.f;
  for (; j < len; ++j) dot += drow[j] * arow[j];
  for (int k = 0; k < L; ++k) dot += acc[k];
  for (j = 0; j < len; ++j) drow[j] = arow[j] * (drow[j] - dot);
  for (j = len; j < t; ++j) drow[j] = 0.f;
}

// Row-major C (m, n) = alpha op(A) op(B) + beta C with explicit leading dimensions.
inline void sgemm(bool ta, bool tb, blasint m, blasint n, blasint k, float alpha, const float* a, blasint lda,
                  const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              lda, b, ldb, beta, c, ldc);
}

void check_heads(int64_t c, int64_t nh) {
  if (nh <= 0 || c <= 0 || c % nh != 0)
    throw std::invalid_argument("attention: C = " + std::to_string(c) + " is not a positive multiple of NH = " +
                                std::to_string(nh));
}

// Attention's shapes as OpenBLAS takes them: per (b, h), q, k and v are (T, HS) views of
// qkv with row stride 3C (dq, dk and dv of dqkv at the same offsets), and the head's block
// of a (B, T, C) tensor (out, dout) has row stride C. Used as
// `const auto [hs, T, HS, C3, Cld, scale] = AttentionDims(t, c, nh);`.
struct AttentionDims {
  int64_t hs;
  blasint T, HS, C3, Cld;
  float scale;  // 1 / sqrt(HS)
  AttentionDims(int64_t t, int64_t c, int64_t nh)
      : hs(c / nh),
        T(blas_int(t, "T")),
        HS(blas_int(hs, "HS")),
        C3(blas_int(3 * c, "3C")),
        Cld(blas_int(c, "C")),
        scale(1.f / std::sqrt(static_cast<float>(hs))) {}
};

// q, k and v (or dq, dk and dv) of the head whose q starts at `off` inside a (B, T, 3C) tensor.
template <class F>
struct QkvViews {
  F* q;
  F* k;
  F* v;
};
template <class F>
QkvViews<F> qkv_views(F* base, int64_t off, int64_t c) {
  return {base + off, base + off + c, base + off + 2 * c};
}

}  // namespace

// --- embedding -------------------------------------------------------------------------

void CpuKernels::embedding_forward(float* __restrict out, const float* __restrict table,
                                   const int32_t* __restrict ids, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * c, table + static_cast<int64_t>(ids[i]) * c, static_cast<size_t>(c) * sizeof(float));
}

void CpuKernels::embedding_backward_acc(float* __restrict dtable, const float* __restrict dout,
                                        const int32_t* __restrict ids, int64_t n, int64_t c,
                                        int64_t /*vocab*/) {
  // One pass in increasing n is the order kernels.h prescribes for repeated ids.
  for (int64_t i = 0; i < n; ++i) {
    float* __restrict row = dtable + static_cast<int64_t>(ids[i]) * c;
    const float* __restrict src = dout + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] += src[j];
  }
}

// --- attention -------------------------------------------------------------------------
// Per (b, h): q, k, v are (T, HS) views of qkv with row stride 3C, out's head block a
// (T, HS) view with row stride C, and att a dense (T, T) block. The products run in
// blocks of kRowBlock rows cut at the diagonal block's edge (a few scores past the
// diagonal are computed); the softmax then writes every row in full, masked part exactly
// 0, so nothing downstream reads an entry the products left unwritten.

void CpuKernels::attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                                   int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const auto [hs, T, HS, C3, Cld, scale] = AttentionDims(t, c, nh);
  std::vector<float> row_buf(static_cast<size_t>((t + 7) / 8 * 8));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < nh; ++h) {
      const auto [q, k, v] = qkv_views(qkv, bi * t * 3 * c + h * hs, c);
      float* a = att + (bi * nh + h) * t * t;
      float* o = out + bi * t * c + h * hs;
      // Row block [r0, r0 + m) sees keys [0, r0 + m) only.
      for (blasint r0 = 0; r0 < T; r0 += kRowBlock) {
        const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock, keys = r0 + m;
        sgemm(false, true, m, keys, HS, scale, q + r0 * C3, C3, k, C3, 0.f, a + r0 * T, T);
      }
      for (int64_t i = 0; i < t; ++i) causal_softmax_row(a + i * t, i + 1, t, row_buf.data());
      for (blasint r0 = 0; r0 < T; r0 += kRowBlock) {
        const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock, keys = r0 + m;
        sgemm(false, false, m, HS, keys, 1.f, a + r0 * T, T, v, C3, 0.f, o + r0 * Cld, Cld);
      }
    }
}

void CpuKernels::attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                                    const float* att, int64_t b, int64_t t, int64_t c, int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const auto [hs, T, HS, C3, Cld, scale] = AttentionDims(t, c, nh);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t off = bi * t * 3 * c + h * hs;
      const auto [q, k, v] = qkv_views(qkv, off, c);
      const auto [dq, dk, dv] = qkv_views(dqkv, off, c);
      const float* a = att + (bi * nh + h) * t * t;
      float* da = datt + (bi * nh + h) * t * t;
      const float* dout_h = dout + bi * t * c + h * hs;
      // Key block [r0, r0 + m) is seen by queries [r0, T) only: dv and dk take their sums
      // over those rows; query block [r0, r0 + m) sees keys [0, r0 + m), as in forward.
      for (blasint r0 = 0; r0 < T; r0 += kRowBlock) {
        const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock, keys = r0 + m, queries = T - r0;
        sgemm(true, false, m, HS, queries, 1.f, a + r0 * T + r0, T, dout_h + r0 * Cld, Cld, 0.f, dv + r0 * C3,
              C3);                                                                                 // dv = att^T dout
        sgemm(false, true, m, keys, HS, 1.f, dout_h + r0 * Cld, Cld, v, C3, 0.f, da + r0 * T, T);  // datt = dout v^T
      }
      for (int64_t i = 0; i < t; ++i) softmax_backward_row(da + i * t, a + i * t, i + 1, t);
      for (blasint r0 = 0; r0 < T; r0 += kRowBlock) {
        const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock, keys = r0 + m, queries = T - r0;
        sgemm(false, false, m, HS, keys, scale, da + r0 * T, T, k, C3, 0.f, dq + r0 * C3, C3);  // dq = dpre k
        sgemm(true, false, m, HS, queries, scale, da + r0 * T + r0, T, q + r0 * C3, C3, 0.f, dk + r0 * C3,
              C3);                                                                              // dk = dpre^T q
      }
    }
}

// --- attention, tiled (flash-style) ------------------------------------------------------
// Per (b, h), query blocks of kRowBlock rows against key blocks of kRowBlock keys up to the
// diagonal block; the scores of one block pair (at most 32 x 32) are all that exists of
// the T x T matrix. Forward keeps per row a running max m, a running sum l of e^(s - m)
// and the unnormalised output, rescaled by e^(m_old - m_new) when a block raises the max;
// backward walks key blocks outer and the query blocks that see them inner, rebuilding
// p = e^(s - lse) and adding dv, dk (that key block's, owned by the outer loop) and dq.
// The diagonal block masks its future entries to exactly 0 after the exp (exp_vec clamps,
// so e^-inf is not 0 by itself).

namespace {

// In place in the (m, n) block s (row stride kRowBlock): p = e^(s - mx[i]) over row i's
// visible keys, exact 0 past them (in the diagonal block key j is visible to row i iff j <= i).
inline void tile_exp_rows(float* __restrict s, blasint m, blasint n, bool diagonal, const float* __restrict mx) {
  for (blasint i = 0; i < m; ++i) {
    float* __restrict row = s + i * kRowBlock;
    const float mi = mx[i];
    const blasint visible = diagonal ? i + 1 : n;
    for (blasint j = 0; j < n; ++j) row[j] = select(j < visible, exp_vec(row[j] - mi), 0.f);
  }
}

}  // namespace

void CpuKernels::attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                                         int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const auto [hs, T, HS, C3, Cld, scale] = AttentionDims(t, c, nh);
  std::vector<float> s(kRowBlock * kRowBlock), acc(static_cast<size_t>(kRowBlock * hs));
  float m_run[kRowBlock], l_run[kRowBlock], m_new[kRowBlock];
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < nh; ++h) {
      const auto [q, k, v] = qkv_views(qkv, bi * t * 3 * c + h * hs, c);
      float* o = out + bi * t * c + h * hs;
      float* row_lse = lse + (bi * nh + h) * t;
      for (blasint r0 = 0; r0 < T; r0 += kRowBlock) {
        const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock;
        for (blasint i = 0; i < m; ++i) m_run[i] = -INFINITY, l_run[i] = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (blasint k0 = 0; k0 <= r0; k0 += kRowBlock) {
          const bool diagonal = k0 == r0;
          const blasint n = diagonal ? m : kRowBlock;
          sgemm(false, true, m, n, HS, scale, q + r0 * C3, C3, k + k0 * C3, C3, 0.f, s.data(), kRowBlock);
          for (blasint i = 0; i < m; ++i) {
            const float* row = s.data() + i * kRowBlock;
            float mx = m_run[i];
            for (blasint j = 0; j < (diagonal ? i + 1 : n); ++j) mx = std::max(mx, row[j]);
            m_new[i] = mx;
          }
          tile_exp_rows(s.data(), m, n, diagonal, m_new);
          for (blasint i = 0; i < m; ++i) {
            const float alpha = exp_vec(m_run[i] - m_new[i]);  // e^-inf clamps to ~1e-38: times 0
            const float* row = s.data() + i * kRowBlock;
            float sum = 0.f;
            for (blasint j = 0; j < n; ++j) sum += row[j];
            l_run[i] = l_run[i] * alpha + sum;
            m_run[i] = m_new[i];
            float* a = acc.data() + i * hs;
            for (int64_t d = 0; d < hs; ++d) a[d] *= alpha;
          }
          sgemm(false, false, m, HS, n, 1.f, s.data(), kRowBlock, v + k0 * C3, C3, 1.f, acc.data(), HS);
        }
        for (blasint i = 0; i < m; ++i) {
          const float inv = 1.f / l_run[i];
          const float* a = acc.data() + i * hs;
          float* orow = o + (r0 + i) * c;
          for (int64_t d = 0; d < hs; ++d) orow[d] = a[d] * inv;
          row_lse[r0 + i] = m_run[i] + std::log(l_run[i]);
        }
      }
    }
}

void CpuKernels::attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                                          const float* lse, int64_t b, int64_t t, int64_t c, int64_t nh) {
  check_heads(c, nh);
  if (b == 0 || t == 0) return;
  const auto [hs, T, HS, C3, Cld, scale] = AttentionDims(t, c, nh);
  std::vector<float> p(kRowBlock * kRowBlock), ds(kRowBlock * kRowBlock), delta(static_cast<size_t>(t));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t off = bi * t * 3 * c + h * hs;
      const auto [q, k, v] = qkv_views(qkv, off, c);
      const auto [dq, dk, dv] = qkv_views(dqkv, off, c);
      const float* o = out + bi * t * c + h * hs;
      const float* dout_h = dout + bi * t * c + h * hs;
      const float* row_lse = lse + (bi * nh + h) * t;
      // delta_i = dout_i . out_i = sum_j p_ij (dout_i . v_j), softmax backward's row term.
      for (int64_t i = 0; i < t; ++i) {
        float dot = 0.f;
        for (int64_t d = 0; d < hs; ++d) dot += dout_h[i * c + d] * o[i * c + d];
        delta[static_cast<size_t>(i)] = dot;
      }
      for (int64_t i = 0; i < t; ++i)
        for (int64_t part = 0; part < 3; ++part) std::fill_n(dq + i * 3 * c + part * c, hs, 0.f);
      for (blasint k0 = 0; k0 < T; k0 += kRowBlock) {
        const blasint n = T - k0 < kRowBlock ? T - k0 : kRowBlock;
        for (blasint r0 = k0; r0 < T; r0 += kRowBlock) {
          const bool diagonal = r0 == k0;
          const blasint m = T - r0 < kRowBlock ? T - r0 : kRowBlock;
          sgemm(false, true, m, n, HS, scale, q + r0 * C3, C3, k + k0 * C3, C3, 0.f, p.data(), kRowBlock);
          tile_exp_rows(p.data(), m, n, diagonal, row_lse + r0);
          sgemm(true, false, n, HS, m, 1.f, p.data(), kRowBlock, dout_h + r0 * Cld, Cld, 1.f, dv + k0 * C3,
                C3);  // dv += p^T dout
          sgemm(false, true, m, n, HS, 1.f, dout_h + r0 * Cld, Cld, v + k0 * C3, C3, 0.f, ds.data(),
                kRowBlock);  // dp = dout v^T
          for (blasint i = 0; i < m; ++i) {
            const float di = delta[static_cast<size_t>(r0 + i)];
            const float* prow = p.data() + i * kRowBlock;
            float* drow = ds.data() + i * kRowBlock;
            for (blasint j = 0; j < n; ++j) drow[j] = prow[j] * (drow[j] - di);
          }
          sgemm(false, false, m, HS, n, scale, ds.data(), kRowBlock, k + k0 * C3, C3, 1.f, dq + r0 * C3,
                C3);  // dq += ds k
          sgemm(true, false, n, HS, m, scale, ds.data(), kRowBlock, q + r0 * C3, C3, 1.f, dk + k0 * C3,
                C3);  // dk += ds^T q
        }
      }
    }
}

// --- attention's batched pieces (runtime/batched_attention.h) ----------------------------
// The GPU's decomposition of the two kernels above, on the CPU: the same row functions, so
// the composition gives attention_forward's values (tests/unit/test_batched_attention.cpp).

void CpuKernels::gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                                      bool trans_a, bool trans_b, float alpha, float beta, int64_t batch,
                                      int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm(C + i * stride_c, A + i * stride_a, B + i * stride_b, M, N, K, trans_a, trans_b, alpha, beta);
}

void CpuKernels::gemm_strided_batched_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N,
                                           int64_t K, bool trans_a, bool trans_b, float alpha, float beta,
                                           int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  if (batch <= 0 || M == 0 || N == 0) return;
  // The elements the matrices span: the last one's start plus its size.
  const int64_t span_a = (batch - 1) * stride_a + M * K, span_b = (batch - 1) * stride_b + K * N;
  std::vector<float> a(static_cast<size_t>(span_a)), b(static_cast<size_t>(span_b));
  bf16_to_f32(a.data(), A, span_a);
  bf16_to_f32(b.data(), B, span_b);
  gemm_strided_batched(C, a.data(), b.data(), M, N, K, trans_a, trans_b, alpha, beta, batch, stride_a, stride_b,
                       stride_c);
}

namespace {
// heads (P, B, NH, T, HS) <-> x (B, T, P, NH, HS), one HS-float run at a time.
template <bool kToHeads>
void permute_heads(float* __restrict heads, float* __restrict x, int64_t parts, int64_t b, int64_t t, int64_t c,
                   int64_t nh) {
  const int64_t hs = c / nh;
  const size_t run = static_cast<size_t>(hs) * sizeof(float);
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t ti = 0; ti < t; ++ti) {
          float* hrow = heads + (((p * b + bi) * nh + h) * t + ti) * hs;
          float* xrow = x + ((bi * t + ti) * parts + p) * c + h * hs;
          if constexpr (kToHeads)
            std::memcpy(hrow, xrow, run);
          else
            std::memcpy(xrow, hrow, run);
        }
}
}  // namespace

void CpuKernels::split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c,
                             int64_t nh) {
  check_heads(c, nh);
  permute_heads<true>(heads, const_cast<float*>(x), parts, b, t, c, nh);
}

void CpuKernels::merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c,
                             int64_t nh) {
  check_heads(c, nh);
  permute_heads<false>(const_cast<float*>(heads), x, parts, b, t, c, nh);
}

void CpuKernels::causal_softmax_forward(float* att, int64_t rows, int64_t t) {
  if (t <= 0) return;
  std::vector<float> row_buf(static_cast<size_t>((t + 7) / 8 * 8));
  for (int64_t r = 0; r < rows; ++r) causal_softmax_row(att + r * t, r % t + 1, t, row_buf.data());
}

void CpuKernels::causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t) {
  if (t <= 0) return;
  for (int64_t r = 0; r < rows; ++r) softmax_backward_row(datt + r * t, att + r * t, r % t + 1, t);
}

// --- GELU, tanh approximation ----------------------------------------------------------
// 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^{-2u}): one exp, no cancellation near 0,
// and d/du of it is 2 s (1 - s).

void CpuKernels::gelu_tanh_forward(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[i] = xi / (1.f + exp_vec(-2.f * u));
  }
}

void CpuKernels::gelu_tanh_backward(float* __restrict dx, const float* __restrict dy,
                                    const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float x2 = xi * xi;
    const float u = kSqrt2OverPi * (xi + kGeluCubic * x2 * xi);
    const float s = 1.f / (1.f + exp_vec(-2.f * u));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x2);
    dx[i] = dy[i] * (s + xi * 2.f * s * (1.f - s) * du);
  }
}

// --- gradient clipping -----------------------------------------------------------------

void CpuKernels::sum_squares_acc(double* out, const float* __restrict x, int64_t n) {
  constexpr int L = 8;
  double acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int k = 0; k < L; ++k) acc[k] += static_cast<double>(x[i + k]) * static_cast<double>(x[i + k]);
  double s = 0.0;
  for (; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int k = 0; k < L; ++k) s += acc[k];
  out[0] += s;
}

void CpuKernels::clip_scale(float* __restrict x, int64_t n, const double* sum_sq, int64_t parts, float max_norm) {
  double total = 0.0;
  for (int64_t i = 0; i < parts; ++i) total += sum_sq[i];
  // Float arithmetic, as torch's coefficient (a float32 tensor); CUDA computes the same.
  const float coef = max_norm / (std::sqrt(static_cast<float>(total)) + 1e-6f);
  if (!(coef < 1.f)) return;
  for (int64_t i = 0; i < n; ++i) x[i] *= coef;
}

TANDEM_CPU_ISA_END
