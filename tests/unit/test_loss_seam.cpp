// The loss and metric seams (runtime/layers/loss.h, metric.h) through the strategies:
// a two-head model with a weighted multi-task loss trains the same in single and DP(2)
// (DP gathers each output along its rows and weights replicas by rows); WeightedSum's
// value and gradients are its terms' weighted sums; no_sync adds the calls' gradients;
// evaluation reports every metric by name; mismatches are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/metric.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/single.h"
#include "tests/support/compare.h"

using namespace tandem;

namespace {

// A shared trunk and two classifier heads (4 and 3 classes): outputs {head_a, head_b}.
class TwoHeads final : public Model {
 public:
  TwoHeads() {
    add("trunk", std::make_unique<Linear>(6, 8));
    add("act", std::make_unique<ReLU>());
    add("head_a", std::make_unique<Linear>(8, 4));
    add("head_b", std::make_unique<Linear>(8, 3));
    reset_parameters(5);
  }
  std::vector<Tensor> forward_outputs(const Tensor& x) override {
    Tensor h = layer(1).forward(layer(0).forward(x));
    return {layer(2).forward(h), layer(3).forward(h)};
  }
  Tensor backward_outputs(std::span<const Tensor> douts) override {
    // Both heads read h: its gradient is the sum of theirs.
    Tensor dh = layer(3).backward(douts[1]);
    fire_grad_ready(layer(3));
    Tensor dh_a = layer(2).backward(douts[0]);
    fire_grad_ready(layer(2));
    Tensor sum = dh.clone();
    kernels_for(sum.device()).axpy(sum.f32(), dh_a.f32(), sum.numel(), 1.0f);
    Tensor dx = layer(0).backward(layer(1).backward(sum));
    fire_grad_ready(layer(1));
    fire_grad_ready(layer(0));
    return dx;
  }
};

Tensor labels_of(const std::vector<int32_t>& y) {
  Tensor t = Tensor::empty({static_cast<int64_t>(y.size())}, DType::i32);
  std::memcpy(t.raw(), y.data(), y.size() * sizeof(int32_t));
  return t;
}

Batch two_task_batch(int64_t step, int64_t rows) {
  std::vector<float> x(rows * 6);
  uint64_t s = 99 + step;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 33) % 1000) / 500.0f - 1.0f;
  }
  std::vector<int32_t> a(rows), b(rows);
  for (int64_t i = 0; i < rows; ++i) a[i] = static_cast<int32_t>((i + step) % 4), b[i] = static_cast<int32_t>((2 * i + step) % 3);
  Batch batch;
  batch.inputs = Tensor::from_vector(x, {rows, 6});
  batch.labels = labels_of(a);
  batch.extra_targets = {labels_of(b)};
  return batch;
}

LossFactory two_task_loss() {
  return [](const LossContext&) {
    std::vector<WeightedSum::Term> terms;
    terms.push_back({std::make_unique<SoftmaxCrossEntropy>(), 0.75f, 0, 0});
    terms.push_back({std::make_unique<SoftmaxCrossEntropy>(), 0.25f, 1, 1});
    return std::make_unique<WeightedSum>(std::move(terms));
  };
}

OptimizerConfig sgd() {
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  return oc;
}

TEST(LossSeam, MultiTaskModelTrainsTheSameInSingleAndDataParallel) {
  set_cpu_threads(1);
  SingleStrategy single(std::make_unique<TwoHeads>(), sgd(), Device::cpu(), two_task_loss());
  std::vector<std::unique_ptr<Model>> replicas;
  replicas.push_back(std::make_unique<TwoHeads>());
  replicas.push_back(std::make_unique<TwoHeads>());
  DataParallelStrategy dp(std::move(replicas), sgd(), {Device::cpu(), Device::cpu()}, two_task_loss());
  for (int64_t step = 0; step < 5; ++step) {
    // 9 rows: DP's replicas get 5 and 4, so the rows weighting is exercised.
    Batch b = two_task_batch(step, 9);
    const double ls = single.forward_backward(b).loss();
    const double ld = dp.forward_backward(b).loss();
    EXPECT_NEAR(ld, ls, 1e-6 * std::fabs(ls)) << "step " << step;
    single.step(0.1f);
    dp.step(0.1f);
  }
  EXPECT_LT(tandem::testing::max_relative_difference(dp.model(), single.model()), 1e-5);
}

TEST(LossSeam, WeightedSumIsTheWeightedSumOfItsTerms) {
  TwoHeads model;
  Batch b = two_task_batch(0, 7);
  std::vector<Tensor> outs = model.forward_outputs(b.inputs);
  std::vector<Tensor> targets = b.targets_on(Device::cpu());
  SoftmaxCrossEntropy a, c;
  const double la = a.forward(outs[0], targets[0]), lc = c.forward(outs[1], targets[1]);
  auto loss = two_task_loss()({});
  LossSum sum = loss->forward(outs, targets);
  EXPECT_EQ(sum.rows, 7);
  EXPECT_NEAR(sum.sum->get() / 7.0, 0.75 * la + 0.25 * lc, 1e-6);
  std::span<const Tensor> g = loss->backward(0.5f);
  ASSERT_EQ(g.size(), 2u);
  const auto ga = g[0].to_vector(), gc = g[1].to_vector();
  const auto ea = a.dlogits(0.5f * 0.75f).to_vector(), ec = c.dlogits(0.5f * 0.25f).to_vector();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_EQ(ga[i], ea[i]) << i;
  for (size_t i = 0; i < gc.size(); ++i) EXPECT_EQ(gc[i], ec[i]) << i;

  // Two terms on one output: their gradients add.
  std::vector<WeightedSum::Term> same;
  same.push_back({std::make_unique<SoftmaxCrossEntropy>(), 0.5f, 0, 0});
  same.push_back({std::make_unique<SoftmaxCrossEntropy>(), 0.5f, 0, 0});
  WeightedSum twice(std::move(same));
  LossSum s2 = twice.forward(outs, targets);
  EXPECT_NEAR(s2.sum->get() / 7.0, la, 1e-6);
  const auto g2 = twice.backward(1.0f)[0].to_vector(), e2 = a.dlogits(1.0f).to_vector();
  for (size_t i = 0; i < g2.size(); ++i) EXPECT_NEAR(g2[i], e2[i], 1e-7f) << i;
}

TEST(LossSeam, MismatchesAreRefusedByName) {
  TwoHeads model;
  Batch b = two_task_batch(0, 4);
  std::vector<Tensor> outs = model.forward_outputs(b.inputs);
  std::vector<Tensor> only_labels{b.labels};
  auto loss = two_task_loss()({});
  try {
    loss->forward(outs, only_labels);
    FAIL() << "a missing target was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reads target 1 but the batch holds 1"), std::string::npos) << e.what();
  }
  // A one-output model asked for two gradients.
  Model plain;
  plain.add("fc", std::make_unique<Linear>(6, 4));
  plain.forward_outputs(b.inputs);
  std::vector<Tensor> two(2);
  EXPECT_THROW(plain.backward_outputs(two), std::invalid_argument);
  // A factory that gives no loss.
  EXPECT_THROW(SingleStrategy(std::make_unique<TwoHeads>(), sgd(), Device::cpu(),
                              [](const LossContext&) { return std::unique_ptr<Loss>(); }),
               std::invalid_argument);
}

TEST(LossSeam, NoSyncAddsTheCallsGradientsAndRefusesAStepBetween) {
  set_cpu_threads(1);
  SingleStrategy acc(std::make_unique<TwoHeads>(), sgd(), Device::cpu(), two_task_loss());
  SingleStrategy one(std::make_unique<TwoHeads>(), sgd(), Device::cpu(), two_task_loss());
  std::vector<std::vector<float>> expected;
  for (int64_t c = 0; c < 3; ++c) {
    one.forward_backward(two_task_batch(c, 6));
    for (size_t i = 0; i < one.model().parameters().size(); ++i) {
      auto g = one.model().parameters()[i]->grad.to_vector();
      if (c == 0) expected.push_back(g);
      else
        for (size_t j = 0; j < g.size(); ++j) expected[i][j] += g[j];
    }
  }
  {
    auto scope = acc.no_sync();
    acc.forward_backward(two_task_batch(0, 6));
    acc.forward_backward(two_task_batch(1, 6));
  }
  EXPECT_THROW(acc.step(0.1f), std::logic_error);
  acc.forward_backward(two_task_batch(2, 6));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto g = acc.model().parameters()[i]->grad.to_vector();
    for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], expected[i][j], 1e-6f) << i << "," << j;
  }
  EXPECT_NO_THROW(acc.step(0.1f));
}

// A metric of the caller's own: the mean of output 1's first column (a stand-in for any
// statistic a user computes on the host).
class MeanFirstColumn final : public Metric {
 public:
  std::string name() const override { return "head_b_mean0"; }
  void reset() override { sum_ = 0, rows_ = 0; }
  void add(std::span<const Tensor> outputs, std::span<const Tensor>) override {
    const auto v = outputs[1].to_vector();
    for (int64_t r = 0; r < outputs[1].dim(0); ++r) sum_ += v[r * outputs[1].dim(1)];
    rows_ += outputs[1].dim(0);
  }
  double value() const override { return rows_ ? sum_ / static_cast<double>(rows_) : 0; }

 private:
  double sum_ = 0;
  int64_t rows_ = 0;
};

class FixedBatches final : public BatchSource {
 public:
  explicit FixedBatches(std::vector<Batch> b) : batches_(std::move(b)) {}
  int64_t batch_size() const override { return batches_[0].inputs.dim(0); }
  int64_t replicas() const override { return 1; }
  int64_t steps_per_epoch() const override { return static_cast<int64_t>(batches_.size()); }
  void seek(LoaderPosition p) override { pos_ = p; }
  LoaderPosition position() const override { return pos_; }
  std::optional<Batch> next() override {
    if (pos_.step_in_epoch >= steps_per_epoch()) return std::nullopt;
    return batches_[pos_.step_in_epoch++];
  }

 private:
  std::vector<Batch> batches_;
  LoaderPosition pos_;
};

TEST(LossSeam, EvaluateReportsEveryMetricByName) {
  SingleStrategy s(std::make_unique<TwoHeads>(), sgd(), Device::cpu(), two_task_loss());
  s.set_metrics([] {
    Metrics m;
    m.push_back(std::make_unique<Accuracy>());
    m.push_back(std::make_unique<MeanFirstColumn>());
    return m;
  });
  FixedBatches eval({two_task_batch(0, 5), two_task_batch(1, 3)});
  EvalResult r = s.evaluate(eval);
  ASSERT_EQ(r.metrics.size(), 2u);
  EXPECT_EQ(r.metrics[0].first, "accuracy");
  EXPECT_EQ(r.metrics[1].first, "head_b_mean0");
  EXPECT_EQ(r.samples, 8);
  // The same figures computed directly.
  int64_t correct = 0;
  double loss = 0, col = 0;
  for (int64_t step : {0, 1}) {
    Batch b = two_task_batch(step, step == 0 ? 5 : 3);
    s.model().set_training(false);
    std::vector<Tensor> outs = s.model().forward_outputs(b.inputs);
    s.model().set_training(true);
    correct += SoftmaxCrossEntropy::count_correct(outs[0], b.labels);
    SoftmaxCrossEntropy a, c;
    loss += 0.75 * a.forward(outs[0], b.labels) * b.labels.dim(0) + 0.25 * c.forward(outs[1], b.extra_targets[0]) * b.labels.dim(0);
    const auto v = outs[1].to_vector();
    for (int64_t i = 0; i < outs[1].dim(0); ++i) col += v[i * 3];
  }
  EXPECT_DOUBLE_EQ(*r.metric("accuracy"), static_cast<double>(correct) / 8.0);
  EXPECT_NEAR(*r.metric("head_b_mean0"), col / 8.0, 1e-12);
  EXPECT_NEAR(r.loss, loss / 8.0, 1e-6);
  EXPECT_FALSE(r.metric("f1").has_value());
}

}  // namespace
