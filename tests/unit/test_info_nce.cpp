// InfoNce (runtime/layers/info_nce.h) with a null group, i.e. over the batch it is given:
// its loss against a direct computation in double, its gradients against central finite
// differences (of that double reference, tightly, and of its own float forward with the
// tolerances of test_layers_gradcheck.cpp), both forms (q -> k and CLIP's symmetric one);
// AllGatherRows without a group is the identity; bad inputs are refused by name; and a
// two-view model trains the same in single and DataParallel(2), whose loss sees the
// gathered batch.
//
// Tolerances: the float forward of a loss of order 1 over N = 5 rows rounds to ~1e-6
// relative, so the value is checked to 1e-5 relative. The double reference's central
// differences with h = 1e-4 err by ~h^2 * f''' ~ 1e-7, below the float gradient's own
// rounding (~1e-6 of the largest element), so analytic vs numeric is checked to 1e-4 of
// the largest gradient element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/info_nce.h"
#include "runtime/layers/linear.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/layers/gather.h"
#include "runtime/strategy/single.h"
#include "tests/support/compare.h"
#include "tests/support/two_views.h"

using namespace tandem;

namespace {

constexpr int64_t kN = 5, kD = 3;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The sum over rows of -log softmax_j(a_i . b_j / t)[i], in double.
double direction_sum(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t d, double t) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> logits(n);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += a[i * d + c] * b[j * d + c];
      logits[j] = s / t;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double l : logits) z += std::exp(l - mx);
    total += mx + std::log(z) - logits[i];
  }
  return total;
}

double reference_sum(const std::vector<double>& q, const std::vector<double>& k, const InfoNceOptions& o) {
  const double qk = direction_sum(q, k, kN, kD, o.temperature);
  if (!o.symmetric) return qk;
  return 0.5 * (qk + direction_sum(k, q, kN, kD, o.temperature));
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

class InfoNceForms : public ::testing::TestWithParam<bool> {};

TEST_P(InfoNceForms, LossMatchesADirectComputationInDouble) {
  InfoNceOptions o;
  o.temperature = 0.5f;
  o.symmetric = GetParam();
  const std::vector<float> qv = randn(kN * kD, 1), kv = randn(kN * kD, 2);
  const std::vector<Tensor> outs = {Tensor::from_vector(qv, {kN, kD}), Tensor::from_vector(kv, {kN, kD})};
  InfoNce loss(nullptr, o);
  LossSum s = loss.forward(outs, {});
  EXPECT_EQ(s.rows, kN);
  const double want = reference_sum(to_double(qv), to_double(kv), o);
  EXPECT_NEAR(s.sum->get(), want, 1e-5 * std::fabs(want));
  std::printf("loss relative error vs double: %.3g\n", std::fabs(s.sum->get() - want) / std::fabs(want));
  EXPECT_EQ(loss.name(), "info_nce");
}

TEST_P(InfoNceForms, GradientsMatchFiniteDifferences) {
  InfoNceOptions o;
  o.temperature = 0.5f;
  o.symmetric = GetParam();
  const float scale = 0.7f;
  std::vector<float> qv = randn(kN * kD, 3), kv = randn(kN * kD, 4);
  InfoNce loss(nullptr, o);
  std::vector<Tensor> outs = {Tensor::from_vector(qv, {kN, kD}), Tensor::from_vector(kv, {kN, kD})};
  // Targets are not read: any given are ignored.
  const std::vector<Tensor> targets = {Tensor::zeros({kN}, DType::i32)};
  loss.forward(outs, targets);
  std::span<const Tensor> g = loss.backward(scale);
  ASSERT_EQ(g.size(), 2u);
  const std::vector<float> analytic[2] = {g[0].to_vector(), g[1].to_vector()};

  std::vector<double> qd = to_double(qv), kd = to_double(kv);
  std::vector<double>* sides[2] = {&qd, &kd};
  std::vector<float>* fsides[2] = {&qv, &kv};
  double worst = 0;  // |analytic - numeric (double)| / largest, reported
  for (int side = 0; side < 2; ++side) {
    double largest = 0;
    for (float a : analytic[side]) largest = std::max(largest, static_cast<double>(std::fabs(a)));
    ASSERT_GT(largest, 1e-3);
    for (size_t e = 0; e < analytic[side].size(); ++e) {
      // The double reference, h = 1e-4.
      std::vector<double>& x = *sides[side];
      const double saved = x[e], h = 1e-4;
      x[e] = saved + h;
      const double lp = reference_sum(qd, kd, o);
      x[e] = saved - h;
      const double lm = reference_sum(qd, kd, o);
      x[e] = saved;
      const double numeric = scale * (lp - lm) / (2 * h);
      EXPECT_NEAR(analytic[side][e], numeric, 1e-4 * largest) << "side " << side << " element " << e;
      worst = std::max(worst, std::fabs(analytic[side][e] - numeric) / largest);
      // The loss's own float forward, eps = 1e-2 (test_layers_gradcheck.cpp's tolerances).
      std::vector<float>& xf = *fsides[side];
      const float fs = xf[e];
      const float hi = fs + 1e-2f, lo = fs - 1e-2f;
      auto value = [&](float v) {
        xf[e] = v;
        InfoNce probe(nullptr, o);
        const std::vector<Tensor> p = {Tensor::from_vector(qv, {kN, kD}), Tensor::from_vector(kv, {kN, kD})};
        return probe.forward(p, {}).sum->get();
      };
      const double fnum = scale * (value(hi) - value(lo)) / (static_cast<double>(hi) - lo);
      xf[e] = fs;
      EXPECT_NEAR(analytic[side][e], fnum, 1e-3 + 1e-2 * std::fabs(analytic[side][e]))
          << "side " << side << " element " << e;
    }
  }
  std::printf("max |analytic - finite difference| / max |gradient|: %.3g\n", worst);
}

TEST_P(InfoNceForms, RepeatedStepsGiveTheSameResult) {
  InfoNceOptions o;
  o.symmetric = GetParam();
  InfoNce loss(nullptr, o);
  const std::vector<Tensor> outs = {Tensor::from_vector(randn(kN * kD, 5), {kN, kD}),
                                    Tensor::from_vector(randn(kN * kD, 6), {kN, kD})};
  const double first = loss.forward(outs, {}).sum->get();
  const std::vector<float> g0 = loss.backward(1.0f)[0].to_vector(), g1 = loss.backward(1.0f)[1].to_vector();
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(loss.forward(outs, {}).sum->get(), first);
    std::span<const Tensor> g = loss.backward(1.0f);
    EXPECT_EQ(g[0].to_vector(), g0);
    EXPECT_EQ(g[1].to_vector(), g1);
  }
}

INSTANTIATE_TEST_SUITE_P(QToKAndSymmetric, InfoNceForms, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "symmetric" : "q_to_k"; });

TEST(InfoNce, RefusesWhatDoesNotFit) {
  InfoNce loss;
  const Tensor q = Tensor::zeros({4, 3});
  const std::vector<Tensor> one = {q};
  EXPECT_THROW(loss.forward(one, {}), std::invalid_argument);
  const std::vector<Tensor> mismatch = {q, Tensor::zeros({4, 2})};
  EXPECT_THROW(loss.forward(mismatch, {}), std::invalid_argument);
  const std::vector<Tensor> flat = {Tensor::zeros({12}), Tensor::zeros({12})};
  EXPECT_THROW(loss.forward(flat, {}), std::invalid_argument);
  EXPECT_THROW(loss.backward(1.0f), std::logic_error);
  EXPECT_THROW(InfoNce(nullptr, InfoNceOptions{0.f, false}), std::invalid_argument);
}

TEST(AllGatherRows, WithoutAGroupIsTheIdentity) {
  AllGatherRows gather(nullptr);
  const Tensor x = Tensor::from_vector(randn(6, 7), {3, 2});
  EXPECT_TRUE(gather.forward(x).shares_storage_with(x));
  const Tensor dy = Tensor::from_vector(randn(6, 8), {3, 2});
  EXPECT_TRUE(gather.backward(dy).shares_storage_with(dy));
  EXPECT_THROW(gather.backward(Tensor::zeros({2, 2})), std::invalid_argument);
}

using tandem::testing::TwoViews;

Batch two_view_batch(int64_t step, int64_t rows) {
  Batch b;
  b.inputs = Tensor::from_vector(randn(rows * 2 * 6, 100 + static_cast<uint32_t>(step)), {rows, 2, 6});
  return b;
}

TEST(InfoNce, TwoViewModelTrainsTheSameInSingleAndDataParallel) {
  set_cpu_threads(1);
  for (bool symmetric : {false, true}) {
    const LossFactory make_loss = [symmetric](const LossContext& ctx) {
      EXPECT_EQ(ctx.group, nullptr);
      return std::make_unique<InfoNce>(ctx.group, InfoNceOptions{0.2f, symmetric});
    };
    OptimizerConfig oc;
    oc.momentum = 0.9f;
    SingleStrategy single(std::make_unique<TwoViews>(), oc, Device::cpu(), make_loss);
    std::vector<std::unique_ptr<Model>> replicas;
    replicas.push_back(std::make_unique<TwoViews>());
    replicas.push_back(std::make_unique<TwoViews>());
    DataParallelStrategy dp(std::move(replicas), oc, {Device::cpu(), Device::cpu()}, make_loss);
    for (int64_t step = 0; step < 4; ++step) {
      const Batch b = two_view_batch(step, 7);  // replicas get 4 and 3 rows
      const double ls = single.forward_backward(b).loss();
      const double ld = dp.forward_backward(b).loss();
      EXPECT_NEAR(ld, ls, 1e-6 * std::fabs(ls)) << "step " << step << (symmetric ? " symmetric" : "");
      single.step(0.1f);
      dp.step(0.1f);
    }
    const double params = tandem::testing::max_relative_difference(dp.model(), single.model());
    EXPECT_LT(params, 1e-5);
    std::printf("%s: dp(2) vs single parameters after 4 steps: %.3g\n", symmetric ? "symmetric" : "q_to_k", params);
  }
}

}  // namespace
