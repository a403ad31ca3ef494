// The CPU kernel levels of runtime/cpu/cpu_isa.h: every level this CPU can run computes,
// kernel by kernel, exactly the bits the baseline copy computes (the kernels are built
// without floating-point contraction and reduce in fixed lanes, so no tolerance is needed:
// any difference is a bug, e.g. a vector path that rounds differently), and the
// TANDEM_CPU_KERNELS setting's errors say what was wrong and what is valid.
// Sizes are odd (not multiples of 8 or 16) so every vector loop's tail runs too. The one
// exception to bit equality is a NaN's payload from f32_to_f16 (F16C keeps more of it
// than fp16.h), so the inputs hold no NaN. Levels the CPU lacks are skipped, and said so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/cpu_kernels.h"
#include "tests/support/finite_differences.h"

namespace tandem {
namespace {

using cpu::CpuIsa;
using testing::randn;

std::vector<int32_t> labels(size_t n, int32_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(classes));
  return v;
}

// Everything a run writes, as raw bytes: outputs are appended in a fixed order.
struct Out {
  std::vector<unsigned char> bytes;
  template <typename T>
  void add(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  template <typename T>
  void add_value(T v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
};

// Runs `body` on the baseline kernels and on every higher level this CPU supports, and
// requires the same bytes. Returns the number of levels compared against the baseline.
int expect_same_bits(const char* name, const std::function<void(Kernels&, Out&)>& body) {
  Out base;
  body(cpu::kernels_for_isa(CpuIsa::baseline), base);
  int compared = 0;
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (isa > cpu::cpu_isa_best()) continue;
    Out got;
    body(cpu::kernels_for_isa(isa), got);
    EXPECT_EQ(got.bytes.size(), base.bytes.size()) << name << " at " << cpu::cpu_isa_name(isa);
    const size_t n = std::min(got.bytes.size(), base.bytes.size());
    for (size_t i = 0; i < n; ++i)
      if (got.bytes[i] != base.bytes[i]) {
        ADD_FAILURE() << name << ": the " << cpu::cpu_isa_name(isa) << " kernels differ from the baseline at byte "
                      << i << " of " << n;
        break;
      }
    ++compared;
  }
  return compared;
}

constexpr int64_t kN = 4099;  // odd: every vector width leaves a tail

TEST(CpuDispatch, ReportsTheLevels) {
  // Printed so that a run under an emulated CPU (tests/qemu/) shows what it chose.
  std::printf("cpu kernels: best %s, chosen %s, set %s\n", cpu::cpu_isa_name(cpu::cpu_isa_best()),
              cpu::cpu_isa_name(cpu::cpu_isa()), cpu::cpu_kernel_set().c_str());
  EXPECT_LE(cpu::cpu_isa(), cpu::cpu_isa_best());
  EXPECT_EQ(&cpu::kernels(), &cpu::kernels_for_isa(cpu::cpu_isa()));
  if (cpu::cpu_isa_best() < CpuIsa::avx512) {
    EXPECT_THROW(cpu::kernels_for_isa(CpuIsa::avx512), std::runtime_error);
  }
}

TEST(CpuDispatch, SettingErrorsNameTheProblem) {
  EXPECT_EQ(cpu::cpu_isa_from_setting(std::nullopt, CpuIsa::avx2), CpuIsa::avx2);
  EXPECT_EQ(cpu::cpu_isa_from_setting("", CpuIsa::avx512), CpuIsa::avx512);
  EXPECT_EQ(cpu::cpu_isa_from_setting("auto", CpuIsa::baseline), CpuIsa::baseline);
  EXPECT_EQ(cpu::cpu_isa_from_setting("baseline", CpuIsa::avx512), CpuIsa::baseline);
  EXPECT_EQ(cpu::cpu_isa_from_setting("avx2", CpuIsa::avx2), CpuIsa::avx2);
  try {
    cpu::cpu_isa_from_setting("avx512", CpuIsa::avx2);
    ADD_FAILURE() << "a level above the CPU's was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("TANDEM_CPU_KERNELS=avx512"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'avx2'"), std::string::npos) << "names the CPU's best: " << e.what();
  }
  try {
    cpu::cpu_isa_from_setting("sse4", CpuIsa::avx512);
    ADD_FAILURE() << "an unknown level was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'sse4'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("baseline, avx2, avx512"), std::string::npos) << e.what();
  }
}

TEST(CpuDispatch, ElementwiseKernelsMatchTheBaseline) {
  const std::vector<float> x = randn(kN, 1), y0 = randn(kN, 2), dy = randn(kN, 3);
  const int64_t rows = 36, cols = 111, n = 3, c = 5, hw = 99;  // rows * cols <= kN: x holds them
  const std::vector<float> bias = randn(cols, 4), cbias = randn(c, 5), img = randn(n * c * hw, 6);
  if (expect_same_bits("elementwise", [&](Kernels& k, Out& o) {
        std::vector<float> a(kN), b = y0, m(kN);
        k.fill(a.data(), kN, 0.75f);
        o.add(a);
        b = y0;
        k.scale(b.data(), kN, 1.37f);
        o.add(b);
        b = y0;
        k.axpy(b.data(), x.data(), kN, -0.3f);
        o.add(b);
        std::vector<float> r(x.begin(), x.begin() + rows * cols);
        k.add_bias_rows(r.data(), bias.data(), rows, cols);
        o.add(r);
        std::vector<float> sr(bias);
        k.sum_rows_acc(sr.data(), x.data(), rows, cols);
        o.add(sr);
        std::vector<float> ch(img), sc(cbias);
        k.add_bias_channels(ch.data(), cbias.data(), n, c, hw);
        k.sum_channels_acc(sc.data(), img.data(), n, c, hw);
        o.add(ch);
        o.add(sc);
        k.relu_forward(a.data(), x.data(), kN);
        o.add(a);
        k.relu_backward(a.data(), dy.data(), x.data(), kN);
        o.add(a);
        k.gelu_forward(a.data(), x.data(), kN);
        o.add(a);
        k.gelu_backward(a.data(), dy.data(), x.data(), kN);
        o.add(a);
        k.dropout_forward(a.data(), m.data(), x.data(), kN, 0.3f, 12345);
        o.add(a);
        o.add(m);
        k.mul(a.data(), x.data(), y0.data(), kN);
        o.add(a);
        o.add_value(k.sum(x.data(), kN));
        k.gelu_tanh_forward(a.data(), x.data(), kN);
        o.add(a);
        k.gelu_tanh_backward(a.data(), dy.data(), x.data(), kN);
        o.add(a);
        double ss = 0.5;
        k.sum_squares_acc(&ss, x.data(), kN);
        o.add_value(ss);
        b = y0;
        const double parts[2] = {900.0, 400.0};
        k.clip_scale(b.data(), kN, parts, 2, 1.5f);
        o.add(b);
        std::vector<uint16_t> h(kN);
        std::vector<float> back(kN);
        std::vector<float> wide = randn(kN, 7, 3e4f);  // reaches f16's overflow to inf
        wide[0] = 1e-8f;                                // and its subnormals
        k.f32_to_f16(h.data(), wide.data(), kN);
        o.add(h);
        k.f16_to_f32(back.data(), h.data(), kN);
        o.add(back);
        k.f32_to_bf16(h.data(), wide.data(), kN);
        o.add(h);
        k.bf16_to_f32(back.data(), h.data(), kN);
        o.add(back);
      }) == 0)
    GTEST_SKIP() << "this CPU runs only the baseline kernels: nothing to compare";
}

TEST(CpuDispatch, NormalisationLossAndOptimizerKernelsMatchTheBaseline) {
  const int64_t rows = 29, cols = 203, classes = 45;
  const std::vector<float> x = randn(rows * cols, 11), dy = randn(rows * cols, 12);
  const std::vector<float> gamma = randn(cols, 13), beta = randn(cols, 14);
  const std::vector<float> logits = randn(rows * classes, 15, 3.f), target = randn(rows * cols, 16);
  const std::vector<int32_t> lab = labels(rows, static_cast<int32_t>(classes), 17);
  const std::vector<float> grad = randn(kN, 18), p0 = randn(kN, 19), m0 = randn(kN, 20, 0.1f);
  std::vector<float> v0 = randn(kN, 21, 0.1f);
  for (float& v : v0) v = v * v;
  if (expect_same_bits("normalisation, loss and optimizers", [&](Kernels& k, Out& o) {
        std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dg(cols, 0.f), db(cols, 0.f);
        k.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols,
                            1e-5f);
        k.layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                             rstd.data(), rows, cols);
        o.add(y), o.add(mean), o.add(rstd), o.add(dx), o.add(dg), o.add(db);
        std::vector<float> probs(rows * classes), losses(rows), dl(rows * classes);
        k.softmax_xent_forward(probs.data(), losses.data(), logits.data(), lab.data(), rows, classes);
        k.softmax_xent_backward(dl.data(), probs.data(), lab.data(), rows, classes, 0.25f);
        o.add(probs), o.add(losses), o.add(dl);
        o.add_value(k.count_correct(logits.data(), lab.data(), rows, classes));
        std::vector<float> rl(rows), dp(rows * cols);
        k.mse_forward(rl.data(), x.data(), target.data(), rows, cols);
        k.mse_backward(dp.data(), x.data(), target.data(), rows, cols, 0.5f);
        o.add(rl), o.add(dp);
        k.bce_logits_forward(rl.data(), x.data(), target.data(), rows, cols);
        k.bce_logits_backward(dp.data(), x.data(), target.data(), rows, cols, 0.5f);
        o.add(rl), o.add(dp);
        std::vector<float> p = p0, m = m0, v = v0;
        for (int64_t step = 1; step <= 3; ++step)
          k.adamw_update(p.data(), m.data(), v.data(), grad.data(), kN, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
        o.add(p), o.add(m), o.add(v);
        p = p0, m = m0;
        k.sgd_update(p.data(), m.data(), grad.data(), kN, 0.1f, 0.9f, 1e-4f, true, false);
        o.add(p), o.add(m);
      }) == 0)
    GTEST_SKIP() << "this CPU runs only the baseline kernels: nothing to compare";
}

TEST(CpuDispatch, ConvolutionBatchnormAndAttentionKernelsMatchTheBaseline) {
  const int64_t n = 2, c = 3, h = 13, w = 11, kh = 3, kw = 3, stride = 1, pad = 1, oh = 13, ow = 11;
  const std::vector<float> img = randn(n * c * h * w, 31), bnw = randn(c, 32), bnb = randn(c, 33);
  const std::vector<float> dimg = randn(n * c * h * w, 34);
  const int64_t b = 2, t = 19, cc = 24, nh = 3, vocab = 17;
  const std::vector<float> qkv = randn(b * t * 3 * cc, 35), dout = randn(b * t * cc, 36);
  const std::vector<float> table = randn(vocab * cc, 37);
  const std::vector<int32_t> ids = labels(b * t, static_cast<int32_t>(vocab), 38);
  if (expect_same_bits("convolution, batchnorm and attention", [&](Kernels& k, Out& o) {
        std::vector<float> col(c * kh * kw * n * oh * ow), back(n * c * h * w, 0.f);
        k.im2col_batched(col.data(), img.data(), n, c, h, w, kh, kw, stride, pad, oh, ow);
        k.col2im_batched_acc(back.data(), col.data(), n, c, h, w, kh, kw, stride, pad, oh, ow);
        o.add(col), o.add(back);
        std::vector<float> sw(n * c * h * w);
        k.swap_leading(sw.data(), img.data(), n, c, h * w);
        o.add(sw);
        std::vector<float> pooled(n * c * 6 * 5), pdx(n * c * h * w);
        std::vector<int32_t> argmax(n * c * 6 * 5);
        k.maxpool_forward(pooled.data(), argmax.data(), img.data(), n * c, h, w, 2, 2, 6, 5);
        k.maxpool_backward(pdx.data(), pooled.data(), argmax.data(), n * c, h, w, 6, 5);
        o.add(pooled), o.add(argmax), o.add(pdx);
        const int64_t s = h * w;
        std::vector<float> stats(2 * c + 1), mean(c), invstd(c), rm(c, 0.f), rv(c, 1.f), y(n * c * s);
        int64_t tracked = 0;
        k.batchnorm_stats(stats.data(), img.data(), n, c, s);
        k.batchnorm_train_moments(mean.data(), invstd.data(), rm.data(), rv.data(), &tracked, stats.data(), c, 1e-5f,
                                  0.1f);
        k.batchnorm_forward(y.data(), img.data(), mean.data(), invstd.data(), bnw.data(), bnb.data(), n, c, s);
        std::vector<float> sums(2 * c), bdx(n * c * s);
        k.batchnorm_backward_sums(sums.data(), dimg.data(), img.data(), mean.data(), invstd.data(), n, c, s);
        k.batchnorm_backward_dx(bdx.data(), dimg.data(), img.data(), mean.data(), invstd.data(), bnw.data(),
                                sums.data(), &stats[2 * c], n, c, s);
        o.add(stats), o.add(mean), o.add(invstd), o.add(rm), o.add(rv), o.add(y), o.add(sums), o.add(bdx);
        std::vector<float> emb(b * t * cc), dtable(vocab * cc, 0.f);
        k.embedding_forward(emb.data(), table.data(), ids.data(), b * t, cc);
        k.embedding_backward_acc(dtable.data(), dout.data(), ids.data(), b * t, cc, vocab);
        o.add(emb), o.add(dtable);
        std::vector<float> out(b * t * cc), att(b * nh * t * t), dqkv(b * t * 3 * cc), datt(b * nh * t * t);
        k.attention_forward(out.data(), att.data(), qkv.data(), b, t, cc, nh);
        k.attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), b, t, cc, nh);
        o.add(out), o.add(att), o.add(dqkv), o.add(datt);
        // The tiled kernels at a T that crosses their 32-row blocks.
        const int64_t tt = 41;
        const std::vector<float> qkv2 = randn(b * tt * 3 * cc, 39), dout2 = randn(b * tt * cc, 40);
        std::vector<float> out2(b * tt * cc), lse(b * nh * tt), dqkv2(b * tt * 3 * cc);
        k.attention_forward_tiled(out2.data(), lse.data(), qkv2.data(), b, tt, cc, nh);
        k.attention_backward_tiled(dqkv2.data(), dout2.data(), qkv2.data(), out2.data(), lse.data(), b, tt, cc, nh);
        o.add(out2), o.add(lse), o.add(dqkv2);
      }) == 0)
    GTEST_SKIP() << "this CPU runs only the baseline kernels: nothing to compare";
}

}  // namespace
}  // namespace tandem
