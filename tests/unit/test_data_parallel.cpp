// DataParallel equals single-process training with the global batch: DP(2) and DP(3)
// after 5 steps, within 1e-5 relative per parameter (only float summation order
// differs: per-replica partial sums reduce-added instead of one sum over the batch).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/kernels.h"
#include "tests/support/compare.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/single.h"

using namespace tandem;

namespace {

std::unique_ptr<Model> small_cnn() {
  auto m = std::make_unique<Model>();
  m->add("conv1", std::make_unique<Conv2d>(1, 4, 3, 1, 1));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("pool1", std::make_unique<MaxPool2d>(2));
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(4 * 4 * 4, 16));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(16, 10));
  m->reset_parameters(11);
  return m;
}

Batch make_global_batch(int64_t step, int64_t rows) {
  std::vector<float> x(rows * 64);
  uint64_t s = 1234567 + step;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 33) % 1000) / 500.0f - 1.0f;
  }
  Batch b;
  b.inputs = Tensor::from_vector(x, {rows, 1, 8, 8});
  b.labels = Tensor::empty({rows}, DType::i32);
  for (int64_t i = 0; i < rows; ++i) b.labels.data<int32_t>()[i] = static_cast<int32_t>((i * 3 + step) % 10);
  return b;
}


void expect_dp_matches_single(int devices, int64_t accum) {
  set_cpu_threads(1);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.momentum = 0.9f;
  std::vector<std::unique_ptr<Model>> replicas;
  std::vector<Device> devs;
  for (int d = 0; d < devices; ++d) {
    replicas.push_back(small_cnn());
    devs.push_back(Device::cpu());
  }
  DataParallelStrategy dp(std::move(replicas), oc, devs);
  SingleStrategy single(small_cnn(), oc, Device::cpu());
  for (int step = 0; step < 5; ++step) {
    std::vector<Batch> micro;
    for (int64_t m = 0; m < accum; ++m) micro.push_back(make_global_batch(step * accum + m, 6 * devices));
    PhaseTimes t1, t2;
    StepOutput a = dp.forward_backward(micro, t1);
    dp.step(0.05f, t1);
    StepOutput b = single.forward_backward(micro, t2);
    single.step(0.05f, t2);
    EXPECT_NEAR(a.loss(), b.loss(), 1e-5 * std::fabs(b.loss())) << "step " << step;
  }
  EXPECT_LT(tandem::testing::max_relative_difference(dp.model(), single.model()), 1e-5);
}

}  // namespace

TEST(DataParallel, TwoDevicesMatchSingleWithGlobalBatch) { expect_dp_matches_single(2, 1); }
TEST(DataParallel, ThreeDevicesMatchSingleWithGlobalBatch) { expect_dp_matches_single(3, 1); }
TEST(DataParallel, GradientAccumulationMatchesSingle) { expect_dp_matches_single(2, 2); }

TEST(DataParallel, UnevenBatchIsSplitAndStillMatches) {
  // 7 rows over 3 devices: chunks of 3, 2, 2 (as torch.chunk would cut them).
  set_cpu_threads(1);
  OptimizerConfig oc;
  std::vector<std::unique_ptr<Model>> replicas;
  for (int d = 0; d < 3; ++d) replicas.push_back(small_cnn());
  DataParallelStrategy dp(std::move(replicas), oc, {Device::cpu(), Device::cpu(), Device::cpu()});
  SingleStrategy single(small_cnn(), oc, Device::cpu());
  std::vector<Batch> micro{make_global_batch(0, 7)};
  PhaseTimes t;
  dp.forward_backward(micro, t);
  dp.step(0.05f, t);
  single.forward_backward(micro, t);
  single.step(0.05f, t);
  EXPECT_LT(tandem::testing::max_relative_difference(dp.model(), single.model()), 1e-5);
}
