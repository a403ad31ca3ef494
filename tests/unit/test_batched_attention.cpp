// The GPU's attention (runtime/batched_attention.h: head permutes, strided-batched GEMMs,
// the causal softmax row kernels) composed over the CPU kernels, against the CPU's fused
// attention kernel, forward and backward. Both run the same row functions and the same
// sums; only OpenBLAS's tiling differs (the fused kernel multiplies 32-row blocks, the
// composition whole T x T squares, and OpenBLAS's edge tiles may round a product's last
// bit differently: seen at T = 70 on its Haswell kernels), so values agree to a few ulp,
// and are often identical (the emulated GPU's GPT test at T = 16 equals the CPU bit for
// bit, tests/emulated/train_emulated_cuda.sh). The fused kernel
// is itself checked against a double reference and finite differences
// (test_transformer_kernels.cpp), so this pins the composition the emulated GPU and
// cuda/ run. The shapes cross the CPU kernel's 32-row blocks (T = 70) and keep a
// single head and a single row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/batched_attention.h"
#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/cpu_kernels.h"

namespace tandem {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Largest |a - b| / (1 + |a|): a few float ulps of O(1) values is ~1e-7 each, and sums of
// up to T = 70 such terms stay well inside 1e-5; a wrong index or a missing term is O(1).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / (1.0 + std::abs(double(a[i]))));
  return worst;
}
constexpr double kTol = 1e-5;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t b, t, c, nh;
};

class BatchedAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchedAttention, EqualsTheFusedCpuKernel) {
  const auto [b, t, c, nh] = GetParam();
  Kernels& k = cpu::kernels();
  const size_t btc = static_cast<size_t>(b * t * c), att_n = static_cast<size_t>(b * nh * t * t);
  const std::vector<float> qkv = randn(3 * btc, 1), dout = randn(btc, 2);
  std::vector<float> out(btc), att(att_n), dqkv(3 * btc), datt(att_n);
  k.attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh);
  k.attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), b, t, c, nh);

  std::vector<float> out2(btc, -1.f), att2(att_n, -1.f), dqkv2(3 * btc, -1.f), datt2(att_n, -1.f);
  std::vector<float> scratch(batched_attention_scratch(b, t, c, nh, true), -1.f);
  ASSERT_GE(scratch.size(), batched_attention_scratch(b, t, c, nh, false));
  batched_attention_forward(k, out2.data(), att2.data(), qkv.data(), scratch.data(), b, t, c, nh);
  batched_attention_backward(k, dqkv2.data(), datt2.data(), dout.data(), qkv.data(), att2.data(), scratch.data(), b,
                             t, c, nh);
  EXPECT_LE(max_rel_diff(att, att2), kTol) << "att";
  EXPECT_LE(max_rel_diff(out, out2), kTol) << "out";
  EXPECT_LE(max_rel_diff(dqkv, dqkv2), kTol) << "dqkv";
  for (int64_t r = 0; r < b * nh * t; ++r)  // exact zeros past the diagonal, as the fused kernel
    for (int64_t j = r % t + 1; j < t; ++j) ASSERT_EQ(att2[static_cast<size_t>(r * t + j)], 0.f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchedAttention,
                         ::testing::Values(Shape{2, 70, 24, 3}, Shape{3, 16, 16, 2}, Shape{1, 1, 8, 1},
                                           Shape{2, 33, 12, 1}));

TEST(BatchedAttention, HeadPermutesAreInverse) {
  Kernels& k = cpu::kernels();
  const int64_t b = 2, t = 5, c = 12, nh = 3, parts = 3;
  const std::vector<float> x = randn(static_cast<size_t>(parts * b * t * c), 3);
  std::vector<float> heads(x.size()), back(x.size());
  k.split_heads(heads.data(), x.data(), parts, b, t, c, nh);
  // heads (P, B, NH, T, HS): element (p, bi, h, ti, d) is x (bi, ti, p, h, d)
  const int64_t hs = c / nh, p = 2, bi = 1, h = 2, ti = 3, d = 1;
  EXPECT_EQ(heads[static_cast<size_t>((((p * b + bi) * nh + h) * t + ti) * hs + d)],
            x[static_cast<size_t>(((bi * t + ti) * parts + p) * c + h * hs + d)]);
  k.merge_heads(back.data(), heads.data(), parts, b, t, c, nh);
  EXPECT_TRUE(same_bits(x, back));
}

// Under bf16 the products take bf16 operands: small integers are exact in bf16 and every
// product and sum of them exact in f32, so each batched result is the integer one, whatever
// the order of the sums; transposes, strides (with a gap between matrices) and beta as
// gemm_strided_batched's.
TEST(BatchedAttention, Bf16BatchedGemmIsExactOnIntegers) {
  Kernels& k = cpu::kernels();
  const int64_t m = 3, n = 5, kk = 4, batch = 3, sa = m * kk + 2, sb = kk * n + 1, sc = m * n + 3;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      std::vector<float> a(static_cast<size_t>(batch * sa)), b(static_cast<size_t>(batch * sb));
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7 % 11) - 5);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i * 5 % 9) - 4);
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      k.f32_to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
      k.f32_to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
      std::vector<float> c(static_cast<size_t>(batch * sc), 1.f);
      k.gemm_strided_batched_bf16(c.data(), a16.data(), b16.data(), m, n, kk, ta, tb, 2.f, 1.f, batch, sa, sb, sc);
      for (int64_t i = 0; i < batch; ++i) {
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t col = 0; col < n; ++col) {
            double want = 1.0;  // beta 1 times the 1 it held
            for (int64_t x = 0; x < kk; ++x) {
              const double av = a[static_cast<size_t>(i * sa + (ta ? x * m + r : r * kk + x))];
              const double bv = b[static_cast<size_t>(i * sb + (tb ? col * kk + x : x * n + col))];
              want += 2.0 * av * bv;
            }
            ASSERT_EQ(c[static_cast<size_t>(i * sc + r * n + col)], static_cast<float>(want))
                << "ta " << ta << " tb " << tb << " matrix " << i << " (" << r << ", " << col << ")";
          }
        }
        for (int64_t g = m * n; g < sc && i * sc + g < static_cast<int64_t>(c.size()); ++g)
          ASSERT_EQ(c[static_cast<size_t>(i * sc + g)], 1.f) << "the gap after matrix " << i << " was written";
      }
    }
  }
}

// The CPU's batched bf16 product is, matrix by matrix, gemm_bf16's fallback path bit for
// bit (both widen exactly and call the same sgemm), on random values.
TEST(BatchedAttention, CpuBf16BatchedGemmIsTheFallbackPathPerMatrix) {
  Kernels& k = cpu::kernels();
  const int64_t m = 17, n = 9, kk = 33, batch = 4, sa = m * kk, sb = kk * n + 5, sc = m * n;
  std::vector<uint16_t> a16(static_cast<size_t>(batch * sa)), b16(static_cast<size_t>(batch * sb));
  const std::vector<float> a = randn(a16.size(), 8), b = randn(b16.size(), 9);
  const std::vector<float> c0 = randn(static_cast<size_t>(batch * sc), 10);
  k.f32_to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
  k.f32_to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      std::vector<float> got = c0, want = c0;
      k.gemm_strided_batched_bf16(got.data(), a16.data(), b16.data(), m, n, kk, ta, tb, 0.5f, 1.f, batch, sa, sb, sc);
      for (int64_t i = 0; i < batch; ++i)
        cpu::gemm_bf16(cpu::Bf16GemmPath::fallback, want.data() + i * sc, a16.data() + i * sa, b16.data() + i * sb, m,
                       n, kk, ta, tb, 0.5f, 1.f);
      EXPECT_TRUE(same_bits(got, want)) << "ta " << ta << " tb " << tb;
    }
  }
}

// The composition under bf16 (attention's products on bf16 operands, softmax in f32) stays
// within bf16's rounding of the f32 composition (relative 2^-8 per operand, a few such
// errors per value), keeps the exact zeros past the diagonal, and does differ from f32
// (so the bf16 products did run).
TEST_P(BatchedAttention, Bf16ProductsStayWithinBf16RoundingOfFp32) {
  const auto [b, t, c, nh] = GetParam();
  Kernels& k = cpu::kernels();
  const size_t btc = static_cast<size_t>(b * t * c), att_n = static_cast<size_t>(b * nh * t * t);
  const std::vector<float> qkv = randn(3 * btc, 4), dout = randn(btc, 5);
  std::vector<float> out(btc), att(att_n), dqkv(3 * btc), datt(att_n);
  std::vector<float> out16(btc), att16(att_n), dqkv16(3 * btc), datt16(att_n);
  std::vector<float> scratch(batched_attention_scratch(b, t, c, nh, true, Precision::bf16), -1.f);
  ASSERT_GE(scratch.size(), batched_attention_scratch(b, t, c, nh, false, Precision::bf16));
  ASSERT_GT(scratch.size(), batched_attention_scratch(b, t, c, nh, true));
  batched_attention_forward(k, out.data(), att.data(), qkv.data(), scratch.data(), b, t, c, nh);
  batched_attention_backward(k, dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), scratch.data(), b, t,
                             c, nh);
  batched_attention_forward(k, out16.data(), att16.data(), qkv.data(), scratch.data(), b, t, c, nh, Precision::bf16);
  batched_attention_backward(k, dqkv16.data(), datt16.data(), dout.data(), qkv.data(), att16.data(), scratch.data(),
                             b, t, c, nh, Precision::bf16);
  constexpr double kBf16Tol = 5e-2;
  EXPECT_LE(max_rel_diff(att, att16), kBf16Tol) << "att";
  EXPECT_LE(max_rel_diff(out, out16), kBf16Tol) << "out";
  EXPECT_LE(max_rel_diff(dqkv, dqkv16), kBf16Tol) << "dqkv";
  if (t > 1) {
    EXPECT_FALSE(same_bits(dqkv, dqkv16)) << "bf16 gave f32's bits: its products did not run";
  }
  for (int64_t r = 0; r < b * nh * t; ++r)
    for (int64_t j = r % t + 1; j < t; ++j) ASSERT_EQ(att16[static_cast<size_t>(r * t + j)], 0.f);
}

}  // namespace
}  // namespace tandem
