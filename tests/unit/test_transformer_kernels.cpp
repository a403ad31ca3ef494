// The CPU transformer kernels (embedding, causal attention, GELU-tanh, gradient
// clipping) against naive double-precision references and central finite differences,
// plus the exact contracts the other devices must match: exact zeros above the attention
// diagonal, embedding gradients summed in increasing n, clip_scale leaving x untouched
// when the norm is within bounds.
//
// Finite differences: for y = f(x) and a fixed random r, L = sum(y * r) (in double) has
// dL/dy = r; each input is moved by +-eps (the stored float values are used as the step)
// and (L+ - L-) / (x+ - x-) is compared with the backward kernel's dx. As in
// test_layers_gradcheck.cpp, eps = 1e-2, |numeric - analytic| <= 1e-3 + 1e-2 |analytic|:
// float rounding of L is ~1e-6 (so ~5e-5 after dividing by 2 eps), truncation is
// eps^2/6 f''' for these smooth functions, and an indexing error is O(1).
// References: a float kernel summing K terms of O(1) values is within ~K 2^-24 of a
// double reference; the tolerances below allow that for K <= 64 and little more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_kernels.h"

namespace tandem {
namespace {

Kernels& K() { return cpu::kernels(); }

constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 1e-2;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " at " << i;
}

// Checks `analytic` = d(sum(fwd() * r))/dx by central differences over every element of x.
void gradcheck(const std::function<std::vector<float>()>& fwd, const std::vector<float>& r, std::vector<float>& x,
               const std::vector<float>& analytic, const std::string& what) {
  ASSERT_EQ(x.size(), analytic.size());
  auto loss = [&] {
    const std::vector<float> y = fwd();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    const float hi = static_cast<float>(saved + kEps), lo = static_cast<float>(saved - kEps);
    x[i] = hi;
    const double lp = loss();
    x[i] = lo;
    const double lm = loss();
    x[i] = saved;
    const double numeric = (lp - lm) / (static_cast<double>(hi) - lo);
    ASSERT_NEAR(analytic[i], numeric, kAtol + kRtol * std::fabs(analytic[i])) << what << " at " << i;
  }
}

// --- attention references ---------------------------------------------------------------

struct AttnShape {
  int64_t b, t, c, nh;
};

std::string name(const AttnShape& s) {
  return "B=" + std::to_string(s.b) + " T=" + std::to_string(s.t) + " C=" + std::to_string(s.c) +
         " NH=" + std::to_string(s.nh);
}

// Index of q (part 0), k (1) or v (2) at (bi, ti, h, d) inside qkv (B, T, 3C).
int64_t qkv_at(const AttnShape& s, int64_t part, int64_t bi, int64_t ti, int64_t h, int64_t d) {
  const int64_t hs = s.c / s.nh;
  return (bi * s.t + ti) * 3 * s.c + part * s.c + h * hs + d;
}

void attention_reference(const AttnShape& s, const std::vector<float>& qkv, std::vector<double>& out,
                         std::vector<double>& att) {
  const int64_t hs = s.c / s.nh, T = s.t;
  out.assign(s.b * T * s.c, 0.0);
  att.assign(s.b * s.nh * T * T, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t h = 0; h < s.nh; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double* row = &att[((bi * s.nh + h) * T + i) * T];
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d)
            dot += static_cast<double>(qkv[qkv_at(s, 0, bi, i, h, d)]) * qkv[qkv_at(s, 1, bi, j, h, d)];
          row[j] = dot * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += row[j] = std::exp(row[j] - mx);
        for (int64_t j = 0; j <= i; ++j) row[j] /= sum;
        for (int64_t d = 0; d < hs; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += row[j] * qkv[qkv_at(s, 2, bi, j, h, d)];
          out[(bi * T + i) * s.c + h * hs + d] = o;
        }
      }
}

// dqkv from the double reference's att, by the chain rule written out per element.
std::vector<double> attention_backward_reference(const AttnShape& s, const std::vector<float>& qkv,
                                                 const std::vector<double>& att, const std::vector<float>& dout) {
  const int64_t hs = s.c / s.nh, T = s.t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> dqkv(s.b * T * 3 * s.c, 0.0), dpre(T * T);
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t h = 0; h < s.nh; ++h) {
      const double* a = &att[(bi * s.nh + h) * T * T];
      auto dout_at = [&](int64_t ti, int64_t d) { return static_cast<double>(dout[(bi * T + ti) * s.c + h * hs + d]); };
      for (int64_t i = 0; i < T; ++i) {
        double dot = 0;
        std::vector<double> datt(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < hs; ++d) datt[j] += dout_at(i, d) * qkv[qkv_at(s, 2, bi, j, h, d)];
          dot += datt[j] * a[i * T + j];
        }
        for (int64_t j = 0; j < T; ++j) dpre[i * T + j] = j <= i ? a[i * T + j] * (datt[j] - dot) : 0.0;
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < hs; ++d) {
            dqkv[qkv_at(s, 0, bi, i, h, d)] += scale * dpre[i * T + j] * qkv[qkv_at(s, 1, bi, j, h, d)];
            dqkv[qkv_at(s, 1, bi, j, h, d)] += scale * dpre[i * T + j] * qkv[qkv_at(s, 0, bi, i, h, d)];
            dqkv[qkv_at(s, 2, bi, j, h, d)] += a[i * T + j] * dout_at(i, d);
          }
    }
  return dqkv;
}

// T = 1 (one key), NH = 1, HS = 5, 10, 12 (not multiples of 8), B > 1, and the small GPT's shape.
const std::vector<AttnShape> kShapes = {{1, 1, 4, 1}, {2, 1, 6, 2}, {1, 7, 10, 1}, {2, 5, 15, 3},
                                        {3, 9, 24, 2}, {2, 17, 16, 4}, {2, 64, 128, 4}};

TEST(TransformerKernels, AttentionForwardMatchesNaiveReference) {
  for (const AttnShape& s : kShapes) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 11, 1.5f);
    std::vector<float> out(s.b * s.t * s.c, kNaN), att(s.b * s.nh * s.t * s.t, kNaN);
    K().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    std::vector<double> want_out, want_att;
    attention_reference(s, qkv, want_out, want_att);
    expect_close(att, want_att, 1e-5, 1e-6, "att " + name(s));
    expect_close(out, want_out, 1e-4, 1e-5, "out " + name(s));
    for (int64_t r = 0; r < s.b * s.nh * s.t; ++r) {
      const int64_t i = r % s.t;
      double sum = 0;
      for (int64_t j = 0; j < s.t; ++j) {
        const float a = att[r * s.t + j];
        if (j > i) {
          ASSERT_EQ(a, 0.f) << "masked entry (" << i << ", " << j << ") " << name(s);
        }
        sum += a;
      }
      ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r << " " << name(s);
    }
  }
}

TEST(TransformerKernels, AttentionSoftmaxSurvivesLargeScores) {
  // Scores of +-300 overflow an exp that is not max-subtracted.
  const AttnShape s{1, 4, 2, 1};
  std::vector<float> qkv(s.t * 3 * s.c);
  for (int64_t ti = 0; ti < s.t; ++ti)
    for (int64_t d = 0; d < s.c; ++d) {
      qkv[qkv_at(s, 0, 0, ti, 0, d)] = 15.f;
      qkv[qkv_at(s, 1, 0, ti, 0, d)] = ti % 2 ? 15.f : -15.f;
      qkv[qkv_at(s, 2, 0, ti, 0, d)] = static_cast<float>(ti);
    }
  std::vector<float> out(s.t * s.c), att(s.t * s.t);
  K().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
  std::vector<double> want_out, want_att;
  attention_reference(s, qkv, want_out, want_att);
  expect_close(att, want_att, 1e-5, 1e-6, "att");
  expect_close(out, want_out, 1e-5, 1e-6, "out");
}

TEST(TransformerKernels, AttentionBackwardMatchesReference) {
  for (const AttnShape& s : kShapes) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 21);
    const auto dout = randn(s.b * s.t * s.c, 22);
    std::vector<float> out(s.b * s.t * s.c), att(s.b * s.nh * s.t * s.t);
    K().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    std::vector<float> dqkv(qkv.size(), kNaN), datt(att.size(), kNaN);  // dqkv is overwritten
    K().attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), s.b, s.t, s.c, s.nh);
    std::vector<double> want_out, want_att;
    attention_reference(s, qkv, want_out, want_att);
    expect_close(dqkv, attention_backward_reference(s, qkv, want_att, dout), 1e-4, 2e-5, "dqkv " + name(s));
  }
}

TEST(TransformerKernels, AttentionBackwardGradcheck) {
  for (const AttnShape& s : {AttnShape{1, 1, 4, 2}, AttnShape{2, 5, 6, 2}, AttnShape{1, 6, 5, 1}}) {
    auto qkv = randn(s.b * s.t * 3 * s.c, 31);
    const auto r = randn(s.b * s.t * s.c, 32);
    std::vector<float> out(s.b * s.t * s.c), att(s.b * s.nh * s.t * s.t), datt(att.size());
    auto fwd = [&] {
      K().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
      return out;
    };
    fwd();
    std::vector<float> dqkv(qkv.size());
    K().attention_backward(dqkv.data(), datt.data(), r.data(), qkv.data(), att.data(), s.b, s.t, s.c, s.nh);
    gradcheck(fwd, r, qkv, dqkv, "dqkv " + name(s));
  }
}

// --- attention, tiled ------------------------------------------------------------------
// The flash-style kernel against the same double references, the fused kernel and finite
// differences. Besides kShapes, shapes whose T crosses its 32-row blocks: a partial last
// block (T = 33, 70) and off-diagonal blocks (every T > 32).

std::vector<AttnShape> tiled_shapes() {
  std::vector<AttnShape> v = kShapes;
  v.push_back({2, 33, 12, 2});
  v.push_back({1, 70, 20, 4});
  return v;
}

// Each row's log of the sum of e^score over its causal prefix, in double.
std::vector<double> attention_lse_reference(const AttnShape& s, const std::vector<float>& qkv) {
  const int64_t hs = s.c / s.nh, T = s.t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> lse(s.b * s.nh * T);
  for (int64_t bi = 0; bi < s.b; ++bi)
    for (int64_t h = 0; h < s.nh; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> score(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < hs; ++d)
            score[j] += static_cast<double>(qkv[qkv_at(s, 0, bi, i, h, d)]) * qkv[qkv_at(s, 1, bi, j, h, d)];
          mx = std::max(mx, score[j] *= scale);
        }
        for (double x : score) sum += std::exp(x - mx);
        lse[(bi * s.nh + h) * T + i] = mx + std::log(sum);
      }
  return lse;
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(TransformerKernels, TiledAttentionMatchesTheReferencesAndTheFusedKernel) {
  for (const AttnShape& s : tiled_shapes()) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 41);
    const auto dout = randn(s.b * s.t * s.c, 42);
    std::vector<float> out(s.b * s.t * s.c, kNaN), lse(s.b * s.nh * s.t, kNaN), dqkv(qkv.size(), kNaN);
    K().attention_forward_tiled(out.data(), lse.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    K().attention_backward_tiled(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.b, s.t, s.c, s.nh);
    std::vector<double> want_out, want_att;
    attention_reference(s, qkv, want_out, want_att);
    expect_close(out, want_out, 1e-5, 1e-6, "out " + name(s));
    expect_close(lse, attention_lse_reference(s, qkv), 1e-5, 1e-6, "lse " + name(s));
    expect_close(dqkv, attention_backward_reference(s, qkv, want_att, dout), 1e-4, 2e-5, "dqkv " + name(s));

    // The fused kernel's float values, to the same few ulp (sums in another order).
    std::vector<float> fused_out(out.size()), att(s.b * s.nh * s.t * s.t), datt(att.size()), fused_dqkv(qkv.size());
    K().attention_forward(fused_out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    K().attention_backward(fused_dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), s.b, s.t, s.c, s.nh);
    expect_close(out, widen(fused_out), 1e-5, 1e-6, "out vs fused " + name(s));
    expect_close(dqkv, widen(fused_dqkv), 1e-5, 1e-5, "dqkv vs fused " + name(s));
  }
}

TEST(TransformerKernels, TiledAttentionRescalesWhenALaterBlockHoldsTheMax) {
  // Scores grow with the key (q . k_j ~ 21 j): row i's max is in its last block, up to
  // ~1500 above the first block's, so the running sum and output must be rescaled by
  // e^(old max - new max) ~ 0 and no exp may overflow.
  const AttnShape s{1, 70, 2, 1};
  std::vector<float> qkv(s.t * 3 * s.c);
  for (int64_t ti = 0; ti < s.t; ++ti)
    for (int64_t d = 0; d < s.c; ++d) {
      qkv[qkv_at(s, 0, 0, ti, 0, d)] = 15.f;
      qkv[qkv_at(s, 1, 0, ti, 0, d)] = static_cast<float>(ti);
      qkv[qkv_at(s, 2, 0, ti, 0, d)] = static_cast<float>(ti % 5) - 2.f;
    }
  std::vector<float> out(s.t * s.c), lse(s.t);
  K().attention_forward_tiled(out.data(), lse.data(), qkv.data(), s.b, s.t, s.c, s.nh);
  std::vector<double> want_out, want_att;
  attention_reference(s, qkv, want_out, want_att);
  expect_close(out, want_out, 1e-5, 1e-6, "out");
  expect_close(lse, attention_lse_reference(s, qkv), 1e-5, 1e-6, "lse");
}

TEST(TransformerKernels, TiledAttentionBackwardGradcheck) {
  for (const AttnShape& s : {AttnShape{1, 1, 4, 2}, AttnShape{2, 5, 6, 2}, AttnShape{1, 35, 4, 2}}) {
    auto qkv = randn(s.b * s.t * 3 * s.c, 33);
    const auto r = randn(s.b * s.t * s.c, 34);
    std::vector<float> out(s.b * s.t * s.c), lse(s.b * s.nh * s.t);
    auto fwd = [&] {
      K().attention_forward_tiled(out.data(), lse.data(), qkv.data(), s.b, s.t, s.c, s.nh);
      return out;
    };
    fwd();
    std::vector<float> dqkv(qkv.size());
    K().attention_backward_tiled(dqkv.data(), r.data(), qkv.data(), out.data(), lse.data(), s.b, s.t, s.c, s.nh);
    gradcheck(fwd, r, qkv, dqkv, "dqkv " + name(s));
  }
}

// --- embedding --------------------------------------------------------------------------

TEST(TransformerKernels, EmbeddingForwardCopiesRows) {
  const int64_t V = 7, C = 5;
  const auto table = randn(V * C, 41);
  const std::vector<int32_t> ids = {3, 0, 6, 3, 1};
  std::vector<float> out(ids.size() * C, kNaN);
  K().embedding_forward(out.data(), table.data(), ids.data(), static_cast<int64_t>(ids.size()), C);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], table[ids[n] * C + c]);
}

TEST(TransformerKernels, EmbeddingBackwardAddsRepeatedIdsInOrder) {
  const int64_t V = 6, C = 9;
  const std::vector<int32_t> ids = {4, 1, 4, 4, 0, 1, 5, 4};
  const int64_t N = static_cast<int64_t>(ids.size());
  // Magnitudes spread over 1e-4..1e4 so that a different order changes the rounding.
  auto dout = randn(N * C, 42);
  for (int64_t i = 0; i < N * C; ++i) dout[i] *= std::pow(10.f, static_cast<float>(i % 9) - 4.f);
  const auto dtable0 = randn(V * C, 43);
  std::vector<float> want = dtable0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want[ids[n] * C + c] += dout[n * C + c];
  std::vector<float> got = dtable0;
  K().embedding_backward_acc(got.data(), dout.data(), ids.data(), N, C, V);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

TEST(TransformerKernels, EmbeddingGradcheck) {
  const int64_t V = 5, C = 3;
  const std::vector<int32_t> ids = {2, 2, 0, 4, 2, 1};
  const int64_t N = static_cast<int64_t>(ids.size());
  auto table = randn(V * C, 44);
  const auto r = randn(N * C, 45);
  std::vector<float> out(N * C);
  auto fwd = [&] {
    K().embedding_forward(out.data(), table.data(), ids.data(), N, C);
    return out;
  };
  std::vector<float> dtable(V * C, 0.f);
  K().embedding_backward_acc(dtable.data(), r.data(), ids.data(), N, C, V);
  gradcheck(fwd, r, table, dtable, "dtable");
}

// --- GELU, tanh approximation ------------------------------------------------------------

double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double gelu_tanh_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// -10..10 in steps of 1/64 (every kink-free region, both tails, exact zero), then odd ones.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (int i = -640; i <= 640; ++i) x.push_back(static_cast<float>(i) / 64.f);
  for (float v : {-80.f, -30.f, 30.f, 80.f, 1e-20f, -1e-20f, 3e4f}) x.push_back(v);
  return x;
}

TEST(TransformerKernels, GeluTanhMatchesFormula) {
  const auto x = gelu_inputs();
  std::vector<float> y(x.size(), kNaN), dx(x.size(), kNaN);
  const std::vector<float> dy(x.size(), 1.f);
  K().gelu_tanh_forward(y.data(), x.data(), static_cast<int64_t>(x.size()));
  K().gelu_tanh_backward(dx.data(), dy.data(), x.data(), static_cast<int64_t>(x.size()));
  std::vector<double> want_y, want_dx;
  for (float v : x) {
    want_y.push_back(gelu_tanh_ref(v));
    want_dx.push_back(gelu_tanh_grad_ref(v));
  }
  // The argument of tanh carries float rounding (~1e-7 relative), which exp(-2u) turns
  // into ~|u| 1e-7 relative in the tail, where y itself is tiny: hence 1e-7 absolute.
  expect_close(y, want_y, 2e-6, 1e-7, "gelu_tanh y");
  expect_close(dx, want_dx, 2e-6, 1e-6, "gelu_tanh dx");
  EXPECT_EQ(y[640], 0.f);  // x = 0
}

TEST(TransformerKernels, GeluTanhGradcheck) {
  auto x = randn(300, 51, 2.f);
  const auto r = randn(x.size(), 52);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), dx(x.size());
  auto fwd = [&] {
    K().gelu_tanh_forward(y.data(), x.data(), n);
    return y;
  };
  K().gelu_tanh_backward(dx.data(), r.data(), x.data(), n);
  gradcheck(fwd, r, x, dx, "gelu_tanh dx");
}

// --- gradient clipping ------------------------------------------------------------------

TEST(TransformerKernels, SumSquaresAccumulatesExactly) {
  double out = 0.5;
  const std::vector<float> x = {1.f, -2.f, 3.f};
  K().sum_squares_acc(&out, x.data(), 3);
  EXPECT_EQ(out, 14.5);
  K().sum_squares_acc(&out, x.data(), 0);
  EXPECT_EQ(out, 14.5);
  // 1001 values of 0.5 (odd tail past the lanes): 250.25, exact in double.
  const std::vector<float> halves(1001, 0.5f);
  out = 0.0;
  K().sum_squares_acc(&out, halves.data(), 1001);
  EXPECT_EQ(out, 250.25);
  // A random vector: in double, the sum is exact to ~1e-16, so its float is the
  // correctly rounded reference (up to a tie, which these inputs do not hit), and so is
  // the sum of the same vector cut into pieces at odd places.
  const auto r = randn(12345, 61);
  double want = 3.0;
  for (float v : r) want += static_cast<double>(v) * v;
  out = 3.0;
  K().sum_squares_acc(&out, r.data(), static_cast<int64_t>(r.size()));
  EXPECT_NEAR(out, want, 1e-12 * want);
  EXPECT_EQ(static_cast<float>(out), static_cast<float>(want));
  double pieces = 3.0;
  for (int64_t at = 0, len = 7; at < static_cast<int64_t>(r.size()); at += len, len = len * 3 % 1001 + 1)
    K().sum_squares_acc(&pieces, r.data() + at, std::min<int64_t>(len, static_cast<int64_t>(r.size()) - at));
  EXPECT_EQ(static_cast<float>(pieces), static_cast<float>(want));
}

TEST(TransformerKernels, ClipScaleLeavesSmallNormsBitIdentical) {
  const auto x0 = randn(37, 71);
  // Norm below max_norm = 2 by more than the 1e-6 in the denominator (at exactly 2,
  // the coefficient is 2 / (2 + 1e-6) < 1 and torch scales too).
  for (double sum_sq : {0.0, 1.0, 3.99}) {
    std::vector<float> x = x0;
    K().clip_scale(x.data(), static_cast<int64_t>(x.size()), &sum_sq, 1, 2.f);
    ASSERT_EQ(0, std::memcmp(x.data(), x0.data(), x0.size() * sizeof(float))) << "sum_sq " << sum_sq;
  }
}

TEST(TransformerKernels, ClipScaleScalesLargeNorms) {
  const auto x0 = randn(37, 72);
  const double sum_sq = 100.0;
  const float max_norm = 1.f;  // norm 10: coefficient ~0.1
  const float coef = max_norm / (std::sqrt(100.f) + 1e-6f);
  ASSERT_LT(coef, 1.f);
  std::vector<float> x = x0;
  K().clip_scale(x.data(), static_cast<int64_t>(x.size()), &sum_sq, 1, max_norm);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i], x0[i] * coef) << i;
    ASSERT_NEAR(x[i], 0.1 * x0[i], 1e-6);
  }
  // Parts (one per rank under ZeRO) are added in order: 30 + 70 scales as 100 does.
  const double parts[] = {30.0, 70.0};
  std::vector<float> y = x0;
  K().clip_scale(y.data(), static_cast<int64_t>(y.size()), parts, 2, max_norm);
  ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
  // The clipped vector's own norm is max_norm (to the 1e-6 in the denominator).
  double after = 0.0;
  std::vector<float> big = randn(1000, 73, 3.f);
  K().sum_squares_acc(&after, big.data(), static_cast<int64_t>(big.size()));
  K().clip_scale(big.data(), static_cast<int64_t>(big.size()), &after, 1, 1.5f);
  double norm2 = 0.0;
  K().sum_squares_acc(&norm2, big.data(), static_cast<int64_t>(big.size()));
  EXPECT_NEAR(std::sqrt(norm2), 1.5f, 1e-5f);
}

}  // namespace
}  // namespace tandem
