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
// runtime/cuda/ run. The shapes cross the CPU kernel's 32-row blocks (T = 70) and keep a
// single head and a single row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/batched_attention.h"
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
  std::vector<float> scratch(batched_attention_scratch(b, t, c, true), -1.f);
  ASSERT_GE(scratch.size(), batched_attention_scratch(b, t, c, false));
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

}  // namespace
}  // namespace tandem
