// bf16 mixed precision on the CPU (docs/precision.md): the bf16 GEMM's two paths against
// an exact reference and against each other, for every transposition and the alpha and
// beta the layers use; the bf16 operand helper; and layers and a whole GPT under
// Precision::bf16 against the same under fp32.
//
// Tolerances, for S = sum_k |a_k b_k| of an output element:
//  - both paths vs the exact (double) sum of the same bf16 products: 1e-5 S. Every
//    product is exact in f32; only the f32 sums round, ~sqrt(K) 2^-24 S ~ 2e-6 S for K = 784.
//  - native vs fallback: 2e-5 S (the two f32 summation orders, each within 1e-5 S).
//  - bf16 vs f32 on the unrounded inputs: rounding to bf16 (8 significant bits) moves an
//    input by at most u = 2^-8 relatively, so a product by at most 2u + u^2: 8e-3 S bounds
//    it, and the test also sees a nonzero difference (the inputs really were rounded).
//  - layers: max|bf16 - fp32| / max|fp32| <= 3e-2 per output and gradient (a few 2^-8
//    roundings of operands compound through one or two products); a GPT's loss within 1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "zoo/gpt.h"
#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/kernels.h"
#include "runtime/layers/autocast.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"

namespace tandem {
namespace {

using cpu::Bf16GemmPath;

float widen(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bits(const std::vector<float>& f) {
  std::vector<uint16_t> b(f.size());
  cpu::kernels().f32_to_bf16(b.data(), f.data(), static_cast<int64_t>(f.size()));
  return b;
}

struct GemmCase {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
};

// Every transposition the layers use (NT: Linear forward; TN: Linear dW, Conv dcol;
// NN: Linear dx, Conv forward; NT also Conv dW), TT for completeness, on shapes from the
// MLP (batch 128, 784 -> 512), the CNN (32 x 9 columns, 3136 -> 48) and the GPT (768
// tokens of width 128 -> 384), and small odd ones for the edges of the 8 x 32 tiles.
std::vector<GemmCase> cases() {
  std::vector<GemmCase> out;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {9, 31, 17}, {128, 512, 784},
                               {32, 784, 9}, {128, 48, 3136}, {768, 384, 128}, {130, 70, 401}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      out.push_back({s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0, t == 1 ? 0.5f : 1.f, t == 2 ? 1.f : 0.f});
  return out;
}

std::string name(const GemmCase& c) {
  return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + (c.ta ? " A^T" : "") +
         (c.tb ? " B^T" : "") + " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta);
}

TEST(Bf16Gemm, NativeAndFallbackMatchTheExactSumAndEachOther) {
  const bool native = cpu::bf16_native_supported();
  if (!native) std::cout << "[ INFO     ] this CPU has no AVX512-BF16: the fallback alone is checked\n";
  uint32_t seed = 1;
  for (const GemmCase& c : cases()) {
    SCOPED_TRACE(name(c));
    const auto af = uniform(static_cast<size_t>(c.M * c.K), seed++), bf = uniform(static_cast<size_t>(c.K * c.N), seed++);
    const auto a = to_bits(af), b = to_bits(bf);
    const auto c0 = uniform(static_cast<size_t>(c.M * c.N), seed++);
    auto A = [&](int64_t m, int64_t k) { return widen(a[static_cast<size_t>(c.ta ? k * c.M + m : m * c.K + k)]); };
    auto B = [&](int64_t k, int64_t n) { return widen(b[static_cast<size_t>(c.tb ? n * c.K + k : k * c.N + n)]); };
    // beta = 0 must overwrite: C starts as NaN there.
    std::vector<float> init = c.beta == 0.f ? std::vector<float>(c0.size(), std::numeric_limits<float>::quiet_NaN()) : c0;
    std::vector<float> fb = init, nv = init, f32 = init;
    cpu::gemm_bf16(Bf16GemmPath::fallback, fb.data(), a.data(), b.data(), c.M, c.N, c.K, c.ta, c.tb, c.alpha, c.beta);
    if (native)
      cpu::gemm_bf16(Bf16GemmPath::native, nv.data(), a.data(), b.data(), c.M, c.N, c.K, c.ta, c.tb, c.alpha, c.beta);
    cpu::kernels().gemm(f32.data(), af.data(), bf.data(), c.M, c.N, c.K, c.ta, c.tb, c.alpha, c.beta);
    double rounding_seen = 0;
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double exact = 0, s = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          exact += static_cast<double>(A(m, k)) * B(k, n);
          s += std::fabs(static_cast<double>(A(m, k)) * B(k, n));
        }
        const size_t i = static_cast<size_t>(m * c.N + n);
        const double want = c.alpha * exact + (c.beta == 0.f ? 0.0 : c.beta * c0[i]);
        s = std::fabs(c.alpha) * s + 1e-30;
        ASSERT_NEAR(fb[i], want, 1e-5 * s) << "fallback (" << m << ", " << n << ")";
        if (native) {
          ASSERT_NEAR(nv[i], want, 1e-5 * s) << "native (" << m << ", " << n << ")";
          ASSERT_NEAR(nv[i], fb[i], 2e-5 * s) << "native vs fallback (" << m << ", " << n << ")";
        }
        ASSERT_NEAR(fb[i], f32[i], 8e-3 * s) << "bf16 vs f32 (" << m << ", " << n << ")";
        rounding_seen = std::max(rounding_seen, std::fabs(static_cast<double>(fb[i]) - f32[i]));
      }
    if (c.K >= 5) {
      EXPECT_GT(rounding_seen, 0.0) << "bf16 and f32 products agree exactly: were the inputs rounded?";
    }
  }
}

TEST(Bf16Gemm, EmptyProductsScaleC) {
  for (Bf16GemmPath path : {Bf16GemmPath::fallback, Bf16GemmPath::native}) {
    if (path == Bf16GemmPath::native && !cpu::bf16_native_supported()) continue;
    SCOPED_TRACE(cpu::bf16_gemm_path_str(path));
    std::vector<float> c = {1.f, 2.f, 3.f, 4.f};
    cpu::gemm_bf16(path, c.data(), nullptr, nullptr, 2, 2, 0, false, false, 1.f, 0.5f);  // K = 0: C = beta C
    EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
    std::vector<float> nan(4, std::numeric_limits<float>::quiet_NaN());
    cpu::gemm_bf16(path, nan.data(), nullptr, nullptr, 2, 2, 0, false, false, 1.f, 0.f);
    EXPECT_EQ(nan, std::vector<float>(4, 0.f));
  }
}

TEST(Bf16Gemm, NativeRefusesACpuWithoutAvx512Bf16) {
  if (cpu::bf16_native_supported()) GTEST_SKIP() << "this CPU has AVX512-BF16";
  float c = 0;
  const uint16_t one = 0x3F80;
  EXPECT_THROW(cpu::gemm_bf16(Bf16GemmPath::native, &c, &one, &one, 1, 1, 1, false, false, 1.f, 0.f),
               std::runtime_error);
}

TEST(Bf16Autocast, OperandsAreRoundedToNearestEvenAndKeepNaNAndInf) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {1.f, 1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, -inf, inf, std::nanf(""), -0.f};
  Tensor cache;
  const Tensor t = to_bf16(cache, Tensor::from_vector(v, {7}));
  ASSERT_EQ(t.dtype(), DType::bf16);
  const uint16_t* b = bf16_bits(t);
  EXPECT_EQ(b[0], 0x3F80);
  EXPECT_EQ(b[1], 0x3F80);  // tie: to the even 1
  EXPECT_EQ(b[2], 0x3F82);  // tie: to the even 1 + 2^-6
  EXPECT_EQ(b[3], 0xFF80);
  EXPECT_EQ(b[4], 0x7F80);
  EXPECT_TRUE(std::isnan(widen(b[5])));
  EXPECT_EQ(b[6], 0x8000);
  EXPECT_THROW(bf16_bits(Tensor::from_vector(v, {7})), std::logic_error);
  // The layer's buffer is reused while only the cache holds it.
  const void* first = t.raw();
  const Tensor again = to_bf16(cache, Tensor::from_vector(v, {7}));
  EXPECT_NE(again.raw(), first);  // `t` still holds the first buffer
}

double relative(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 1e-12, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return diff / scale;
}

// Output, input gradient and every parameter gradient of `m` on x and dy, in `p`.
std::vector<std::vector<float>> run(Module& m, Precision p, const Tensor& x, const Tensor& dy) {
  m.set_precision(p);
  for (Parameter* q : m.parameters()) std::fill(q->grad.f32(), q->grad.f32() + q->grad.numel(), 0.f);
  std::vector<std::vector<float>> out = {m.forward(x).to_vector()};
  out.push_back(m.backward(dy).to_vector());
  for (Parameter* q : m.parameters()) out.push_back(q->grad.to_vector());
  return out;
}

void expect_close(Module& m, const Tensor& x, const Shape& y_shape) {
  m.set_prefix(m.kind());
  m.reset_parameters(3);
  const Tensor dy = Tensor::from_vector(uniform(shape_numel(y_shape), 8), y_shape);
  const auto f32 = run(m, Precision::fp32, x, dy), bf16 = run(m, Precision::bf16, x, dy);
  const char* what[] = {"output", "input gradient", "weight gradient", "bias gradient"};
  for (size_t i = 0; i < f32.size(); ++i) {
    const double r = relative(bf16[i], f32[i]);
    EXPECT_LE(r, 3e-2) << m.kind() << " " << what[i];
    if (i < 3) {
      EXPECT_GT(r, 0.0) << m.kind() << " " << what[i] << ": bf16 changed nothing";
    }
  }
}

TEST(Bf16Autocast, LayerGradientsStayCloseToFp32) {
  SCOPED_TRACE(cpu::bf16_gemm_path_str(cpu::bf16_gemm_path()));
  Linear fc(200, 48);
  expect_close(fc, Tensor::from_vector(uniform(64 * 200, 4), {64, 200}), {64, 48});
  Conv2d conv(3, 16, 3, 1, 1);
  expect_close(conv, Tensor::from_vector(uniform(4 * 3 * 10 * 10, 5), {4, 3, 10, 10}), {4, 16, 10, 10});
  Conv2d chunked(3, 8, 3, 2, 1);
  chunked.set_chunk_limit(size_t{1} << 30);  // the whole batch in one GEMM, as on a GPU
  expect_close(chunked, Tensor::from_vector(uniform(5 * 3 * 9 * 9, 6), {5, 3, 9, 9}), {5, 8, 5, 5});
}

TEST(Bf16Autocast, GptLossAndGradientsStayCloseToFp32AndNestedModulesFollow) {
  GptModel m(GptConfig{13, 2, 2, 32, 16, 0.f}, 5);
  Tensor ids = Tensor::empty({4, 16}, DType::i32), labels = Tensor::empty({64}, DType::i32);
  for (int64_t i = 0; i < 64; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 13);
    labels.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 13);
  }
  auto step = [&](Precision p) {
    m.set_precision(p);
    m.zero_grad();
    SoftmaxCrossEntropy loss;
    const double l = loss.forward(m.forward(ids), labels);
    m.backward(loss.dlogits(1.f / 64));
    std::vector<std::vector<float>> grads;
    for (Parameter* q : m.parameters()) grads.push_back(q->grad.to_vector());
    return std::make_pair(l, grads);
  };
  const auto [l32, g32] = step(Precision::fp32);
  const auto [l16, g16] = step(Precision::bf16);
  EXPECT_NEAR(l16, l32, 1e-2 * std::fabs(l32));
  EXPECT_NE(l16, l32) << "bf16 changed nothing: did set_precision reach the blocks' Linear layers?";
  for (size_t i = 0; i < g32.size(); ++i)
    EXPECT_LE(relative(g16[i], g32[i]), 5e-2) << m.parameters()[i]->name;
}

}  // namespace
}  // namespace tandem
