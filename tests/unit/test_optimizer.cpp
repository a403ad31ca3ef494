// Optimizer drivers and the learning-rate schedule. The update rules themselves are
// checked against PyTorch semantics in test_cpu_kernels.cpp; here: the schedule's
// shape, state naming (checkpoints key on it), and SGD/AdamW driving every parameter.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/layers/linear.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"

using namespace tandem;

TEST(LrSchedule, LinearWarmupThenCosineToMin) {
  LrSchedule s(0.1f, 10, 110, 0.01f);
  EXPECT_FLOAT_EQ(s.at(0), 0.01f);   // 0.1 * 1/10
  EXPECT_FLOAT_EQ(s.at(4), 0.05f);   // 0.1 * 5/10
  EXPECT_FLOAT_EQ(s.at(9), 0.1f);    // warm-up ends at the peak
  EXPECT_FLOAT_EQ(s.at(10), 0.1f);   // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 0.055f, 1e-6);  // half way: (0.1 + 0.01) / 2
  EXPECT_FLOAT_EQ(s.at(110), 0.01f);    // the end and beyond: min_lr
  EXPECT_FLOAT_EQ(s.at(500), 0.01f);
  for (int64_t i = 10; i < 110; ++i) EXPECT_GE(s.at(i), s.at(i + 1)) << i;
}

TEST(LrSchedule, NoWarmupStartsAtPeakAndBadCountsThrow) {
  LrSchedule s(0.2f, 0, 100);
  EXPECT_FLOAT_EQ(s.at(0), 0.2f);
  EXPECT_NEAR(s.at(100), 0.0f, 1e-7);
  EXPECT_THROW(LrSchedule(0.1f, -1, 10), std::invalid_argument);
  EXPECT_THROW(parse_optimizer_kind("rmsprop"), std::invalid_argument);
}

TEST(Optimizer, StateIsNamedByParameterAndEveryParameterMoves) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    Model m;
    m.add("fc1", std::make_unique<Linear>(3, 2));
    m.reset_parameters(1);
    OptimizerConfig oc;
    oc.kind = kind;
    auto opt = make_optimizer(oc, m.parameters());
    auto state = opt->state();
    ASSERT_EQ(state.size(), kind == OptimizerKind::sgd ? 2u : 4u);
    EXPECT_EQ(state[0].first, kind == OptimizerKind::sgd ? "fc1.weight.momentum_buffer" : "fc1.weight.exp_avg");
    std::vector<std::vector<float>> before;
    for (Parameter* p : m.parameters()) {
      before.push_back(p->value.to_vector());
      std::vector<float> g(static_cast<size_t>(p->grad.numel()), 0.5f);
      p->grad.copy_from(Tensor::from_vector(g, p->grad.shape()));
    }
    opt->step(0.1f);
    EXPECT_EQ(opt->steps_taken(), 1);
    for (size_t i = 0; i < m.parameters().size(); ++i) {
      auto after = m.parameters()[i]->value.to_vector();
      for (size_t j = 0; j < after.size(); ++j) EXPECT_NE(after[j], before[i][j]);
    }
  }
}
