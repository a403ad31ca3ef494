// CPU kernels against naive double-precision references on small inputs, plus the exact
// contracts other devices must match: f16/bf16 bit patterns, the dropout hash, the
// maxpool argmax convention, im2col/col2im adjointness (per image and batched), the
// leading-axes swap, and PyTorch's optimizer steps.
// Tolerances: references are computed in double; a float kernel summing K terms of
// O(1) values is within ~K * 2^-24 relative of it, so 1e-5 relative (plus 1e-6 absolute
// for results near zero) is loose enough for the sizes used here and tight enough to
// catch any indexing or formula error, which shows up at O(1e-1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/cpu_kernels.h"

namespace tandem {
namespace {

Kernels& K() { return cpu::kernels(); }

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel = 1e-5,
                  double abs = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << "at " << i;
}

float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(CpuKernels, GemmAllTransposesWithAlphaBeta) {
  const int64_t M = 5, N = 7, Kd = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.f, 0.5f, 1.f}) {
        auto A = randn(M * Kd, 1), B = randn(Kd * N, 2), C = randn(M * N, 3);
        std::vector<double> want(M * N);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < Kd; ++k) {
              const double a = ta ? A[k * M + i] : A[i * Kd + k];  // A stored (K,M) when transposed
              const double b = tb ? B[j * Kd + k] : B[k * N + j];
              s += a * b;
            }
            want[i * N + j] = 1.5 * s + beta * C[i * N + j];
          }
        K().gemm(C.data(), A.data(), B.data(), M, N, Kd, ta, tb, 1.5f, beta);
        SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb << " beta=" << beta);
        expect_close(C, want);
      }
}

TEST(CpuKernels, GemmBetaZeroIgnoresGarbageAndEmptyK) {
  std::vector<float> A(6, 1.f), B(6, 1.f), C(4, std::nanf(""));
  K().gemm(C.data(), A.data(), B.data(), 2, 2, 3, false, false, 1.f, 0.f);
  for (float c : C) EXPECT_EQ(c, 3.f);
  K().gemm(C.data(), nullptr, nullptr, 2, 2, 0, false, false, 1.f, 0.5f);  // K = 0: C = beta*C
  for (float c : C) EXPECT_EQ(c, 1.5f);
}

TEST(CpuKernels, ElementwiseAndReductions) {
  const int64_t rows = 3, cols = 37;  // 37: exercises vector bodies and scalar tails
  auto x = randn(rows * cols, 4), b = randn(cols, 5);
  std::vector<float> y = x;
  K().add_bias_rows(y.data(), b.data(), rows, cols);
  std::vector<float> sums(cols, 1.f);
  K().sum_rows_acc(sums.data(), x.data(), rows, cols);
  std::vector<double> want_y(rows * cols), want_s(cols, 1.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      want_y[r * cols + c] = double(x[r * cols + c]) + b[c];
      want_s[c] += x[r * cols + c];
    }
  expect_close(y, want_y);
  expect_close(sums, want_s);

  // channels: (n=2, c=3, hw=37)
  auto z = randn(2 * 3 * 37, 6), cb = randn(3, 7);
  std::vector<float> zb = z, csum(3, 0.5f);
  K().add_bias_channels(zb.data(), cb.data(), 2, 3, 37);
  K().sum_channels_acc(csum.data(), z.data(), 2, 3, 37);
  std::vector<double> want_zb(z.size()), want_cs(3, 0.5);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t j = 0; j < 37; ++j) {
        const size_t at = (i * 3 + c) * 37 + j;
        want_zb[at] = double(z[at]) + cb[c];
        want_cs[c] += z[at];
      }
  expect_close(zb, want_zb);
  expect_close(csum, want_cs, 1e-5, 1e-5);

  std::vector<float> r(x.size()), dr(x.size()), g(x.size()), dg(x.size()), m(x.size());
  auto dy = randn(x.size(), 8);
  K().relu_forward(r.data(), x.data(), rows * cols);
  K().relu_backward(dr.data(), dy.data(), r.data(), rows * cols);
  K().gelu_forward(g.data(), x.data(), rows * cols);
  K().gelu_backward(dg.data(), dy.data(), x.data(), rows * cols);
  K().mul(m.data(), x.data(), dy.data(), rows * cols);
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    EXPECT_EQ(r[i], x[i] > 0 ? x[i] : 0.f);
    EXPECT_EQ(dr[i], x[i] > 0 ? dy[i] : 0.f);
    const double cdf = 0.5 * (1 + std::erf(xi / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * xi * xi) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(g[i], xi * cdf, 1e-6);
    EXPECT_NEAR(dg[i], dy[i] * (cdf + xi * pdf), 1e-5);
    EXPECT_EQ(m[i], x[i] * dy[i]);
    total += xi;
  }
  EXPECT_NEAR(K().sum(x.data(), rows * cols), total, 1e-9);

  std::vector<float> a = x, c(x.size());
  K().scale(a.data(), rows * cols, 2.f);
  K().axpy(a.data(), x.data(), rows * cols, -1.f);  // 2x - x = x, exactly
  K().copy(c.data(), a.data(), rows * cols);
  EXPECT_EQ(c, x);
  K().fill(c.data(), rows * cols, 0.25f);
  for (float v : c) EXPECT_EQ(v, 0.25f);
}

TEST(CpuKernels, F16ExactValuesAndRoundingTies) {
  struct Case {
    float f;
    uint16_t h;
  };
  const float inf = INFINITY;
  const std::vector<Case> cases = {
      {1.f, 0x3C00},
      {-2.f, 0xC000},
      {0.f, 0x0000},
      {-0.f, 0x8000},
      {65504.f, 0x7BFF},
      {65520.f, 0x7C00},                    // tie 65504|65536: even rounds to inf
      {1.f + 0x1p-11f, 0x3C00},             // tie 1|1+2^-10: even is 1
      {1.f + 3 * 0x1p-11f, 0x3C02},         // tie 1+2^-10|1+2^-9: even is 1+2^-9
      {1.f + 0x1p-11f + 0x1p-20f, 0x3C01},  // just above the tie rounds up
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},  // subnormal tie 0|2^-24: even is 0
      {3 * 0x1p-25f, 0x0002},
      {0x1p-14f, 0x0400},  // smallest normal
      {inf, 0x7C00},
      {-inf, 0xFC00},
      {1e-10f, 0x0000},
      {1e10f, 0x7C00},
  };
  // The batch (19 values) runs the 8-wide hardware body and the scalar tail; each value
  // is also converted alone, through the tail only.
  std::vector<float> f;
  for (const Case& c : cases) f.push_back(c.f);
  f.push_back(std::nanf(""));
  f.push_back(-std::nanf(""));
  std::vector<uint16_t> h(f.size());
  K().f32_to_f16(h.data(), f.data(), static_cast<int64_t>(f.size()));
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(h[i], cases[i].h) << "batched " << cases[i].f;
    uint16_t one;
    K().f32_to_f16(&one, &cases[i].f, 1);
    EXPECT_EQ(one, cases[i].h) << "single " << cases[i].f;
  }
  for (size_t i = cases.size(); i < f.size(); ++i) {
    EXPECT_EQ(h[i] & 0x7C00, 0x7C00);
    EXPECT_NE(h[i] & 0x03FF, 0) << "NaN must stay NaN";
  }
  std::vector<float> back(f.size());
  K().f16_to_f32(back.data(), h.data(), static_cast<int64_t>(h.size()));
  EXPECT_TRUE(std::isnan(back[cases.size()]));
}

TEST(CpuKernels, F16RoundTripsEveryHalf) {
  std::vector<uint16_t> all(65536), again(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  K().f16_to_f32(f.data(), all.data(), 65536);
  K().f32_to_f16(again.data(), f.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const bool nan = (i & 0x7C00) == 0x7C00 && (i & 0x03FF) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f[i]));
    } else {
      ASSERT_EQ(again[i], all[i]) << "half 0x" << std::hex << i;
    }
  }
}

TEST(CpuKernels, Bf16ExactValuesTiesInfNan) {
  struct Case {
    uint32_t f;
    uint16_t b;
  };
  const std::vector<Case> cases = {
      {0x3F800000, 0x3F80},  // 1
      {0x3F808000, 0x3F80},  // tie 1|1+2^-7: even is 1
      {0x3F818000, 0x3F82},  // tie 1+2^-7|1+2^-6: even is 1+2^-6
      {0x3F808001, 0x3F81},  // above the tie rounds up
      {0x3F807FFF, 0x3F80},  // below the tie rounds down
      {0x7F7FFFFF, 0x7F80},  // FLT_MAX rounds to inf
      {0x7F800000, 0x7F80},  // inf
      {0xFF800000, 0xFF80},  // -inf
      {0x80000000, 0x8000},  // -0
      {0x00000001, 0x0000},  // the smallest subnormal rounds to 0
  };
  std::vector<float> f;
  for (const Case& c : cases) f.push_back(bits_to_f32(c.f));
  for (uint32_t nan : {0x7F800001u, 0x7FFFFFFFu, 0xFF800001u, 0x7FC00000u})
    f.push_back(bits_to_f32(nan));
  std::vector<uint16_t> b(f.size());
  K().f32_to_bf16(b.data(), f.data(), static_cast<int64_t>(f.size()));
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(b[i], cases[i].b) << "case " << i;
  std::vector<float> back(f.size());
  K().bf16_to_f32(back.data(), b.data(), static_cast<int64_t>(b.size()));
  for (size_t i = cases.size(); i < f.size(); ++i) EXPECT_TRUE(std::isnan(back[i])) << "NaN " << i;
  EXPECT_TRUE(std::signbit(back[cases.size() + 2]));

  std::vector<uint16_t> all(65536), again(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  K().bf16_to_f32(wide.data(), all.data(), 65536);
  K().f32_to_bf16(again.data(), wide.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i)
    if (!std::isnan(wide[i])) {
      ASSERT_EQ(again[i], all[i]) << "bf16 0x" << std::hex << i;
    }
}

TEST(CpuKernels, SoftmaxXentStableAndMatchesReference) {
  const int64_t rows = 4, classes = 5;
  auto logits = randn(rows * classes, 9, 3.f);
  logits[0] = 1000.f;  // exp would overflow without subtracting the row max
  logits[1] = -1000.f;
  const std::vector<int32_t> labels = {0, 3, 4, 1};
  std::vector<float> probs(rows * classes), losses(rows), dl(rows * classes);
  K().softmax_xent_forward(probs.data(), losses.data(), logits.data(), labels.data(), rows, classes);
  K().softmax_xent_backward(dl.data(), probs.data(), labels.data(), rows, classes, 0.25f);
  std::vector<double> want_p(rows * classes), want_l(rows), want_d(rows * classes);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, double(logits[r * classes + c]));
    for (int64_t c = 0; c < classes; ++c) s += std::exp(logits[r * classes + c] - mx);
    for (int64_t c = 0; c < classes; ++c) {
      want_p[r * classes + c] = std::exp(logits[r * classes + c] - mx) / s;
      want_d[r * classes + c] = (want_p[r * classes + c] - (c == labels[r])) * 0.25;
    }
    want_l[r] = std::log(s) - (logits[r * classes + labels[r]] - mx);
  }
  expect_close(probs, want_p);
  expect_close(losses, want_l);
  expect_close(dl, want_d);
  const std::vector<int32_t> bad = {0, 5, 0, 0};
  EXPECT_THROW(
      K().softmax_xent_forward(probs.data(), losses.data(), logits.data(), bad.data(), rows, classes),
      std::invalid_argument);
}

TEST(CpuKernels, CountCorrectFirstMaxWins) {
  // clang-format off
  const std::vector<float> logits = {1, 3, 3,   // tie: argmax is 1
                                     2, 2, 2,   // all tied: argmax is 0
                                     0, 0, 5};  // argmax 2
  // clang-format on
  EXPECT_EQ(K().count_correct(logits.data(), std::vector<int32_t>{1, 0, 2}.data(), 3, 3), 3);
  EXPECT_EQ(K().count_correct(logits.data(), std::vector<int32_t>{2, 1, 0}.data(), 3, 3), 0);
}

// torch.optim.SGD's single-tensor step, in double (dampening 0).
void sgd_reference(std::vector<double>& p, std::vector<double>& buf, const std::vector<double>& g,
                   double lr, double mom, double wd, bool nesterov, bool first) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + wd * p[i];
    if (mom != 0) {
      buf[i] = first ? d : mom * buf[i] + d;
      d = nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

TEST(CpuKernels, SgdThreeStepsMatchPytorchSemantics) {
  struct Cfg {
    float mom, wd;
    bool nesterov;
  };
  for (Cfg c : {Cfg{0, 0, false}, Cfg{0, 0.1f, false}, Cfg{0.9f, 0, false}, Cfg{0.9f, 0.01f, false},
                Cfg{0.9f, 0.01f, true}}) {
    std::vector<float> p = {1.f, -2.f, 0.5f},
                       buf(3, 123.f);  // garbage buf: the first step must overwrite it
    std::vector<double> pr(p.begin(), p.end()), br(3);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = {0.1f * (step + 1), -0.3f, 0.7f - step};
      std::vector<double> gd(g.begin(), g.end());
      K().sgd_update(p.data(), c.mom != 0 ? buf.data() : nullptr, g.data(), 3, 0.1f, c.mom, c.wd,
                     c.nesterov, step == 0);
      sgd_reference(pr, br, gd, 0.1f, c.mom, c.wd, c.nesterov, step == 0);
    }
    SCOPED_TRACE(testing::Message() << "momentum " << c.mom << " wd " << c.wd << " nesterov "
                                    << c.nesterov);
    expect_close(p, pr);
  }
}

TEST(CpuKernels, AdamwThreeStepsMatchPytorchSemantics) {
  // The interface passes float hyperparameters, so the reference uses the same rounded
  // values (float(0.999) makes 1-beta2 differ from 0.001 by 1.3e-5 relative).
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  std::vector<float> p = {1.f, -2.f, 0.5f, 0.f}, m(4, 0.f), v(4, 0.f);
  std::vector<double> pr(p.begin(), p.end()), mr(4, 0), vr(4, 0);
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> g = {0.1f * step, -0.3f, 0.7f - step, 1e-6f};
    K().adamw_update(p.data(), m.data(), v.data(), g.data(), 4, float(lr), float(b1), float(b2),
                     float(eps), float(wd), step);
    for (size_t i = 0; i < 4; ++i) {  // decay first, then the moments, then the bias-corrected step
      pr[i] *= 1 - lr * wd;
      mr[i] = b1 * mr[i] + (1 - b1) * g[i];
      vr[i] = b2 * vr[i] + (1 - b2) * double(g[i]) * g[i];
      const double mhat = mr[i] / (1 - std::pow(b1, step)), vhat = vr[i] / (1 - std::pow(b2, step));
      pr[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  expect_close(p, pr);
  expect_close(m, mr);
  expect_close(v, vr, 1e-5, 1e-12);

  // Element results must not depend on where an element sits (vector body or tail):
  // 21 elements repeating a period-7 pattern give bit-identical copies.
  std::vector<float> q(21), qm(21, 0.f), qv(21, 0.f), qg(21);
  for (int i = 0; i < 21; ++i) {
    q[i] = 0.3f * (i % 7) - 1.f;
    qg[i] = 0.11f * (i % 7) - 0.2f;
  }
  for (int step = 1; step <= 2; ++step)
    K().adamw_update(q.data(), qm.data(), qv.data(), qg.data(), 21, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f,
                     step);
  for (int i = 7; i < 21; ++i) EXPECT_EQ(q[i], q[i % 7]) << i;
}

TEST(CpuKernels, DropoutDeterministicKeepRateAndHashContract) {
  const int64_t n = 200000;
  const float p = 0.3f;
  std::vector<float> x(n, 2.f), y(n), mask(n), y2(n), mask2(n), mask3(n);
  K().dropout_forward(y.data(), mask.data(), x.data(), n, p, 42);
  K().dropout_forward(y2.data(), mask2.data(), x.data(), n, p, 42);
  K().dropout_forward(y2.data(), mask3.data(), x.data(), n, p, 43);
  EXPECT_EQ(mask, mask2);
  EXPECT_NE(mask, mask3);
  int64_t kept = 0;
  const float scale = 1.f / (1.f - p);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mask[i] == 0.f || mask[i] == scale) << mask[i];
    ASSERT_EQ(y[i], x[i] * mask[i]);
    kept += mask[i] != 0.f;
  }
  // Binomial(n, 0.7): sd = sqrt(n * 0.21) ~ 205; 5 sd is a deterministic-seed sanity bound.
  EXPECT_NEAR(double(kept), 0.7 * n, 5 * std::sqrt(n * 0.21));
  // The contract a CUDA kernel must reproduce: u = top 24 bits of splitmix64 draw i.
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{12345}}) {
    uint64_t z = 42 + (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const float u = float(z >> 40) / 16777216.f;
    EXPECT_EQ(mask[i], u >= p ? scale : 0.f) << i;
  }
  std::vector<float> all_dropped(8), m1(8);
  K().dropout_forward(all_dropped.data(), m1.data(), x.data(), 8, 1.f, 7);
  for (float v : all_dropped) EXPECT_EQ(v, 0.f);
}

TEST(CpuKernels, MaxpoolArgmaxAndOverlappingBackward) {
  // one plane 3x4, k=2, stride=1 -> 2x3 output with overlapping windows
  // clang-format off
  const std::vector<float> x = {1, 5, 2, 0,
                                3, 5, 9, 1,
                                4, 0, 9, 8};
  // clang-format on
  std::vector<float> y(6);
  std::vector<int32_t> arg(6);
  K().maxpool_forward(y.data(), arg.data(), x.data(), 1, 3, 4, 2, 1, 2, 3);
  EXPECT_EQ(y, (std::vector<float>{5, 9, 9, 5, 9, 9}));
  // window (0,0) ties 5 at index 1 and 5: the first wins; (1,1) ties 9 at 6 and 10.
  EXPECT_EQ(arg, (std::vector<int32_t>{1, 6, 6, 5, 6, 6}));
  std::vector<float> dx(12, -1.f);
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  K().maxpool_backward(dx.data(), dy.data(), arg.data(), 1, 3, 4, 2, 3);
  EXPECT_EQ(dx, (std::vector<float>{0, 1, 0, 0, 0, 4, 2 + 3 + 5 + 6, 0, 0, 0, 0, 0}));

  // A NaN in a window propagates (as PyTorch), wherever it sits in the window.
  const std::vector<float> xn = {1, std::nanf(""), 2, 3};
  float yn;
  int32_t an;
  K().maxpool_forward(&yn, &an, xn.data(), 1, 2, 2, 2, 2, 1, 1);
  EXPECT_TRUE(std::isnan(yn));
  EXPECT_EQ(an, 1);
}

TEST(CpuKernels, Im2colMatchesNaiveAndCol2imIsItsAdjoint) {
  struct Cfg {
    int64_t c, h, w, k, s, p;
  };
  for (Cfg g : {Cfg{3, 7, 5, 3, 2, 1}, Cfg{2, 6, 6, 3, 1, 1}, Cfg{1, 5, 8, 2, 3, 0},
                Cfg{2, 4, 3, 5, 1, 2}, Cfg{1, 3, 3, 1, 1, 0}}) {
    const int64_t oh = (g.h + 2 * g.p - g.k) / g.s + 1, ow = (g.w + 2 * g.p - g.k) / g.s + 1;
    const int64_t rows = g.c * g.k * g.k, ncol = rows * oh * ow;
    auto img = randn(g.c * g.h * g.w, 10);
    auto c = randn(ncol, 11);
    std::vector<float> col(ncol, 99.f), back(img.size(), 0.f);
    K().im2col_batched(col.data(), img.data(), 1, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    K().col2im_batched_acc(back.data(), c.data(), 1, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    double lhs = 0, rhs = 0;
    for (int64_t ch = 0; ch < g.c; ++ch)
      for (int64_t ki = 0; ki < g.k; ++ki)
        for (int64_t kj = 0; kj < g.k; ++kj)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t iy = oy * g.s - g.p + ki, ix = ox * g.s - g.p + kj;
              const bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
              const float want = in ? img[(ch * g.h + iy) * g.w + ix] : 0.f;
              const int64_t at = (((ch * g.k + ki) * g.k + kj) * oh + oy) * ow + ox;
              ASSERT_EQ(col[at], want) << "c=" << ch << " ki=" << ki << " kj=" << kj << " oy=" << oy;
              lhs += double(col[at]) * c[at];
            }
    for (size_t i = 0; i < img.size(); ++i) rhs += double(img[i]) * back[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs))) << "c=" << g.c << " h=" << g.h << " w=" << g.w;
  }
}

// The batched transforms against the per-image ones (already checked against the naive
// map above): bit-exact, since both copy, and per pixel both add in the same order.
TEST(CpuKernels, BatchedIm2colCol2imMatchPerImageAndAreAdjoint) {
  struct Cfg {
    int64_t n, c, h, w, k, s, p;
  };
  for (Cfg g : {Cfg{3, 3, 7, 5, 3, 2, 1}, Cfg{4, 2, 6, 6, 3, 1, 1}, Cfg{2, 1, 5, 8, 2, 3, 0},
                Cfg{3, 2, 4, 3, 5, 1, 2}, Cfg{2, 3, 3, 3, 1, 1, 0}, Cfg{1, 2, 6, 5, 3, 1, 1}}) {
    const int64_t oh = (g.h + 2 * g.p - g.k) / g.s + 1, ow = (g.w + 2 * g.p - g.k) / g.s + 1;
    const int64_t rows = g.c * g.k * g.k, ohw = oh * ow, chw = g.c * g.h * g.w;
    const auto img = randn(g.n * chw, 20);
    std::vector<float> col(rows * g.n * ohw, 99.f), one(rows * ohw);
    K().im2col_batched(col.data(), img.data(), g.n, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    for (int64_t i = 0; i < g.n; ++i) {
      K().im2col_batched(one.data(), img.data() + i * chw, 1, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t q = 0; q < ohw; ++q)
          ASSERT_EQ(col[(r * g.n + i) * ohw + q], one[r * ohw + q]) << "n=" << i << " row=" << r << " at " << q;
    }

    const auto c = randn(col.size(), 21), start = randn(img.size(), 22);
    std::vector<float> back = start, want = start, part(rows * ohw);
    K().col2im_batched_acc(back.data(), c.data(), g.n, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t q = 0; q < ohw; ++q) part[r * ohw + q] = c[(r * g.n + i) * ohw + q];
      K().col2im_batched_acc(want.data() + i * chw, part.data(), 1, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    }
    for (size_t j = 0; j < back.size(); ++j) ASSERT_EQ(back[j], want[j]) << "col2im_batched_acc at " << j;

    // <im2col(x), c> == <x, col2im(c)>, from zero.
    std::vector<float> adj(img.size(), 0.f);
    K().col2im_batched_acc(adj.data(), c.data(), g.n, g.c, g.h, g.w, g.k, g.k, g.s, g.p, oh, ow);
    double lhs = 0, rhs = 0;
    for (size_t j = 0; j < col.size(); ++j) lhs += double(col[j]) * c[j];
    for (size_t j = 0; j < img.size(); ++j) rhs += double(img[j]) * adj[j];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs))) << "n=" << g.n << " c=" << g.c << " h=" << g.h;
  }
}

TEST(CpuKernels, SwapLeadingIsExact) {
  for (auto [a, b, inner] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {1, 4, 3}, {4, 1, 9}, {6, 2, 1}}) {
    const auto src = randn(a * b * inner, 23);
    std::vector<float> dst(src.size(), 99.f), round(src.size(), 99.f);
    K().swap_leading(dst.data(), src.data(), a, b, inner);
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j)
        for (int64_t k = 0; k < inner; ++k)
          ASSERT_EQ(dst[(j * a + i) * inner + k], src[(i * b + j) * inner + k]) << a << "x" << b << "x" << inner;
    K().swap_leading(round.data(), dst.data(), b, a, inner);
    EXPECT_EQ(round, src);
  }
}

TEST(CpuKernels, LayernormForwardMatchesReference) {
  const int64_t rows = 3, cols = 19;
  auto x = randn(rows * cols, 12, 2.f), gamma = randn(cols, 13), beta = randn(cols, 14);
  for (int64_t c = 0; c < cols; ++c) x[c] += 100.f;  // large mean: the two-pass variance stays exact
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  K().layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows,
                        cols, 1e-5f);
  std::vector<double> want(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += x[r * cols + c];
    mu /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    var /= cols;
    for (int64_t c = 0; c < cols; ++c)
      want[r * cols + c] = (x[r * cols + c] - mu) / std::sqrt(var + 1e-5) * gamma[c] + beta[c];
  }
  expect_close(y, want, 1e-4, 1e-4);  // x ~ 100: float inputs carry 100 * 2^-24 ~ 6e-6 of noise
}

TEST(CpuKernels, ThreadCountRoundTrips) {
  const int before = cpu_threads();
  set_cpu_threads(1);
  EXPECT_EQ(cpu_threads(), 1);
  EXPECT_THROW(set_cpu_threads(0), std::invalid_argument);
  set_cpu_threads(before);
  EXPECT_FALSE(cpu::blas_core_name().empty());
}

}  // namespace
}  // namespace tandem
