// BatchNorm1d/2d (runtime/layers/batchnorm.h) on the CPU:
//  - against PyTorch (tests/data/batchnorm_reference.safetensors, written by
//    scripts/make-batchnorm-reference): per train step the output, the input gradient and
//    the weight and bias gradients within 1e-5 relative, running_mean and running_var
//    within 1e-6 relative, num_batches_tracked exactly; then the eval output within 1e-5
//    relative. Relative means max|got - want| / max|want| over the tensor (as
//    tests/unit/test_gpt.cpp): the float sums of both sides round differently, and an
//    element that cancels to ~0 (a dx, a centred output) has no meaningful relative error
//    of its own;
//  - backward against central finite differences of the forward (the method and
//    tolerances of tests/unit/test_layers_gradcheck.cpp) for 1d (N, C), 1d (N, C, L) and
//    2d, affine or not, with a frozen weight, and without dx;
//  - evaluation (running statistics, nothing kept for backward), the running statistics
//    over several steps against their formulas in double, the state dict's names, dtypes
//    and shapes, SyncBatchNorm's sums through a CrossReplicaSum, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/layers/batchnorm.h"
#include "tests/support/finite_differences.h"

using namespace tandem;

namespace {

using tandem::testing::randn;
using tandem::testing::random_tensor;
using tandem::testing::relative_error;

std::map<std::string, Tensor> read_reference() {
  const std::string path = std::string(TANDEM_TEST_DATA_DIR) + "/batchnorm_reference.safetensors";
  SafetensorsHeader header = read_safetensors_header(path);
  std::map<std::string, Tensor> tensors;
  for (const SafetensorsEntry& e : header.tensors) tensors[e.name] = Tensor::empty(e.shape, e.dtype);
  read_safetensors_data(path, header, &tensors);
  return tensors;
}

int64_t tracked(BatchNorm& bn) { return bn.buffers()[2]->value.data<int64_t>()[0]; }

void zero_grads(BatchNorm& bn) { tandem::testing::zero_grads(bn.parameters()); }

// Weight and bias away from 1 and 0, so that their gradients and dx's scaling show.
void randomise_affine(BatchNorm& bn, uint32_t seed) {
  for (Parameter* p : bn.parameters()) {
    const std::vector<float> v = randn(static_cast<size_t>(p->value.numel()), seed++, 0.5f, 1.f);
    p->value.copy_from(Tensor::from_vector(v, p->value.shape()));
  }
}

// d(sum(bn(x) * r))/dx and /d(checked params) against backward(r), by central differences
// (tests/support/finite_differences.h); without the input gradient, none may come back.
void gradcheck(BatchNorm& bn, Tensor x, uint32_t seed, const std::vector<Parameter*>& checked,
               bool check_input = true) {
  zero_grads(bn);  // the unchecked (frozen) ones too: they must stay 0
  const Tensor dx = tandem::testing::gradcheck([&](const Tensor& t) { return bn.forward(t); },
                                               [&](const Tensor& d) { return bn.backward(d); }, checked, x, seed,
                                               check_input);
  if (!check_input) {
    EXPECT_FALSE(dx.defined());
  }
}

// A stand-in for R identical replicas: every replica holds this one's values, so the sum
// is R times them. Records what each call was for.
class ReplicatedSum final : public CrossReplicaSum {
 public:
  explicit ReplicatedSum(int replicas) : replicas_(replicas) {}
  void sum(Tensor& values, const std::string& what) override {
    calls.push_back(what);
    float* v = values.f32();
    for (int64_t i = 0; i < values.numel(); ++i) v[i] *= static_cast<float>(replicas_);
  }
  int replicas() const override { return replicas_; }
  std::vector<std::string> calls;

 private:
  int replicas_;
};

template <typename Fn>
void expect_invalid_argument(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception; wanted one containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(BatchNormGradcheck, OneDimensionalRowsAndSequences) {
  BatchNorm bn(BatchNormKind::d1, 3);
  bn.set_prefix("bn");
  randomise_affine(bn, 1);
  gradcheck(bn, random_tensor({6, 3}, 2, 1.5f, 0.3f), 3, bn.parameters());   // (N, C)
  gradcheck(bn, random_tensor({3, 3, 4}, 4, 0.8f, -1.f), 5, bn.parameters());  // (N, C, L)
  gradcheck(bn, random_tensor({2, 3, 1}, 6), 7, bn.parameters());              // two values per channel
}

TEST(BatchNormGradcheck, TwoDimensionalAffineAndNot) {
  BatchNorm bn(BatchNormKind::d2, 4);
  bn.set_prefix("bn");
  randomise_affine(bn, 8);
  gradcheck(bn, random_tensor({2, 4, 3, 5}, 9, 2.f, 1.f), 10, bn.parameters());
  BatchNorm plain(BatchNormKind::d2, 3, BatchNormOptions{1e-3f, 0.2f, false});
  EXPECT_TRUE(plain.parameters().empty());
  gradcheck(plain, random_tensor({3, 3, 2, 2}, 11), 12, {});
}

TEST(BatchNormGradcheck, FrozenWeightGetsNoGradientAndTheRestIsExact) {
  BatchNorm bn(BatchNormKind::d2, 2);
  bn.set_prefix("bn");
  randomise_affine(bn, 13);
  Parameter* weight = bn.parameters()[0];
  Parameter* bias = bn.parameters()[1];
  weight->requires_grad = false;
  gradcheck(bn, random_tensor({3, 2, 2, 3}, 14), 15, {bias});
  for (float g : weight->grad.to_vector()) EXPECT_EQ(g, 0.f);
  bias->requires_grad = false;  // both frozen: dx alone
  gradcheck(bn, random_tensor({3, 2, 2, 3}, 16), 17, {});
  for (float g : bias->grad.to_vector()) EXPECT_EQ(g, 0.f);
}

TEST(BatchNormGradcheck, WithoutInputGradientOnlyTheParametersAreComputed) {
  BatchNorm bn(BatchNormKind::d1, 3);
  bn.set_prefix("bn");
  randomise_affine(bn, 18);
  bn.set_needs_input_grad(false);
  gradcheck(bn, random_tensor({5, 3, 2}, 19), 20, bn.parameters(), /*check_input=*/false);
  // Nothing to compute at all: an undefined dy is accepted.
  BatchNorm plain(BatchNormKind::d1, 3, BatchNormOptions{1e-5f, 0.1f, false});
  plain.set_needs_input_grad(false);
  plain.forward(random_tensor({5, 3}, 21));
  EXPECT_FALSE(plain.backward(Tensor()).defined());
}

TEST(BatchNorm, EvalUsesTheRunningStatisticsAndKeepsNothing) {
  const int64_t c = 3;
  BatchNorm bn(BatchNormKind::d2, c, BatchNormOptions{1e-3f, 0.1f, true});
  bn.set_prefix("bn");
  randomise_affine(bn, 22);
  const std::vector<float> rm = {0.5f, -1.f, 2.f}, rv = {0.25f, 4.f, 1.5f};
  bn.buffers()[0]->value.copy_from(Tensor::from_vector(rm, {c}));
  bn.buffers()[1]->value.copy_from(Tensor::from_vector(rv, {c}));
  const std::vector<float> w = bn.parameters()[0]->value.to_vector(), b = bn.parameters()[1]->value.to_vector();
  bn.set_training(false);
  const Tensor x = random_tensor({2, c, 3, 2}, 23, 2.f);
  const std::vector<float> y = bn.forward(x).to_vector(), xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t ch = (i / 6) % c;
    const double want = (xv[i] - rm[ch]) / std::sqrt(static_cast<double>(rv[ch]) + 1e-3) * w[ch] + b[ch];
    EXPECT_NEAR(y[i], want, 1e-6 * (1 + std::fabs(want))) << i;
  }
  EXPECT_EQ(bn.buffers()[0]->value.to_vector(), rm);
  EXPECT_EQ(bn.buffers()[1]->value.to_vector(), rv);
  EXPECT_EQ(tracked(bn), 0);
  EXPECT_THROW(bn.backward(Tensor::zeros(x.shape())), std::logic_error);
  // One value per channel is fine in evaluation.
  EXPECT_EQ(bn.forward(random_tensor({1, c, 1, 1}, 24)).shape(), (Shape{1, c, 1, 1}));
}

TEST(BatchNorm, RunningStatisticsFollowMomentumAndUnbiasedVariance) {
  const int64_t c = 2;
  const float momentum = 0.25f;
  BatchNorm bn(BatchNormKind::d1, c, BatchNormOptions{1e-5f, momentum, true});
  bn.set_prefix("bn");
  std::vector<double> rm(c, 0.0), rv(c, 1.0);
  for (int step = 0; step < 4; ++step) {
    const Shape shape = step % 2 ? Shape{4, c, 3} : Shape{7, c};
    const Tensor x = random_tensor(shape, 30 + step, 1.f + step, 0.5f * step);
    bn.forward(x);
    const std::vector<float> xv = x.to_vector();
    const int64_t s = shape.size() == 3 ? shape[2] : 1, count = shape[0] * s;
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < shape[0]; ++i)
        for (int64_t j = 0; j < s; ++j) {
          const double v = xv[static_cast<size_t>((i * c + ch) * s + j)];
          sum += v;
          sq += v * v;
        }
      const double mean = sum / count, var = sq / count - mean * mean;
      rm[ch] = (1 - momentum) * rm[ch] + momentum * mean;
      rv[ch] = (1 - momentum) * rv[ch] + momentum * var * count / (count - 1);
    }
    const std::vector<float> grm = bn.buffers()[0]->value.to_vector(), grv = bn.buffers()[1]->value.to_vector();
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(grm[ch], rm[ch], 1e-6 * (1 + std::fabs(rm[ch]))) << "step " << step << " channel " << ch;
      EXPECT_NEAR(grv[ch], rv[ch], 1e-6 * (1 + std::fabs(rv[ch]))) << "step " << step << " channel " << ch;
    }
    EXPECT_EQ(tracked(bn), step + 1);
  }
  bn.reset_parameters(0);
  EXPECT_EQ(bn.buffers()[0]->value.to_vector(), std::vector<float>(c, 0.f));
  EXPECT_EQ(bn.buffers()[1]->value.to_vector(), std::vector<float>(c, 1.f));
  EXPECT_EQ(tracked(bn), 0);
}

TEST(BatchNorm, StateDictHasPyTorchsNamesDtypesAndShapes) {
  BatchNorm bn(BatchNormKind::d2, 5);
  bn.set_prefix("layer1.0.bn1");
  EXPECT_EQ(bn.kind(), "BatchNorm2d");
  EXPECT_EQ(bn.channels(), 5);
  EXPECT_TRUE(bn.options().affine);
  EXPECT_FALSE(bn.synced());
  const auto params = bn.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "layer1.0.bn1.weight");
  EXPECT_EQ(params[1]->name, "layer1.0.bn1.bias");
  for (Parameter* p : params) {
    EXPECT_EQ(p->value.shape(), (Shape{5}));
    EXPECT_EQ(p->value.dtype(), DType::f32);
  }
  EXPECT_EQ(params[0]->value.to_vector(), std::vector<float>(5, 1.f));
  EXPECT_EQ(params[1]->value.to_vector(), std::vector<float>(5, 0.f));
  const auto buffers = bn.buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0]->name, "layer1.0.bn1.running_mean");
  EXPECT_EQ(buffers[1]->name, "layer1.0.bn1.running_var");
  EXPECT_EQ(buffers[2]->name, "layer1.0.bn1.num_batches_tracked");
  EXPECT_EQ(buffers[0]->value.dtype(), DType::f32);
  EXPECT_EQ(buffers[1]->value.dtype(), DType::f32);
  EXPECT_EQ(buffers[2]->value.dtype(), DType::i64);
  EXPECT_EQ(buffers[0]->value.shape(), (Shape{5}));
  EXPECT_EQ(buffers[1]->value.shape(), (Shape{5}));
  EXPECT_EQ(buffers[2]->value.shape(), (Shape{}));
  EXPECT_EQ(buffers[0]->value.to_vector(), std::vector<float>(5, 0.f));
  EXPECT_EQ(buffers[1]->value.to_vector(), std::vector<float>(5, 1.f));
  EXPECT_EQ(tracked(bn), 0);

  BatchNorm plain(BatchNormKind::d1, 3, BatchNormOptions{1e-5f, 0.1f, false});
  plain.set_prefix("bn");
  EXPECT_EQ(plain.kind(), "BatchNorm1d");
  EXPECT_TRUE(plain.parameters().empty());
  ASSERT_EQ(plain.buffers().size(), 3u);
  EXPECT_EQ(plain.buffers()[0]->name, "bn.running_mean");
}

TEST(BatchNorm, BadInputsAreRefusedNamingTheLayer) {
  BatchNorm bn2(BatchNormKind::d2, 3);
  expect_invalid_argument([&] { bn2.forward(Tensor::zeros({2, 3, 4})); }, "BatchNorm2d: input must be (N, 3, H, W)");
  expect_invalid_argument([&] { bn2.forward(Tensor::zeros({2, 4, 2, 2})); }, "got [2, 4, 2, 2]");
  expect_invalid_argument([&] { bn2.forward(Tensor::zeros({0, 3, 2, 2})); }, "BatchNorm2d: input must be");
  expect_invalid_argument([&] { bn2.forward(Tensor::zeros({2, 3, 2, 2}, DType::i32)); }, "BatchNorm2d: input must be f32");
  expect_invalid_argument([&] { bn2.forward(Tensor::zeros({1, 3, 1, 1})); },
                          "BatchNorm2d: Expected more than 1 value per channel when training, got input size "
                          "[1, 3, 1, 1]");
  BatchNorm bn1(BatchNormKind::d1, 4);
  expect_invalid_argument([&] { bn1.forward(Tensor::zeros({2, 4, 2, 2})); },
                          "BatchNorm1d: input must be (N, 4) or (N, 4, L)");
  expect_invalid_argument([&] { bn1.forward(Tensor::zeros({8})); }, "BatchNorm1d: input must be");
  expect_invalid_argument([&] { bn1.forward(Tensor::zeros({1, 4})); },
                          "Expected more than 1 value per channel when training");
  bn1.forward(random_tensor({3, 4}, 40));
  expect_invalid_argument([&] { bn1.backward(Tensor::zeros({3, 5})); },
                          "BatchNorm1d: output gradient must be [3, 4]");
  expect_invalid_argument([] { BatchNorm bad(BatchNormKind::d2, 0); }, "BatchNorm2d: channels must be positive");
  expect_invalid_argument([] { BatchNorm bad(BatchNormKind::d1, 2, BatchNormOptions{-1.f, 0.1f, true}); },
                          "BatchNorm1d: eps");
}

TEST(BatchNorm, ReleaseActivationsDropsWhatBackwardNeeds) {
  BatchNorm bn(BatchNormKind::d2, 2);
  bn.forward(random_tensor({2, 2, 3, 3}, 41));
  bn.release_activations();
  try {
    bn.backward(Tensor::zeros({2, 2, 3, 3}));
    ADD_FAILURE() << "backward after release_activations did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "BatchNorm2d: backward called without a preceding forward");
  }
  // Backward consumes what forward saved: a second backward has nothing either.
  bn.forward(random_tensor({2, 2, 3, 3}, 42));
  bn.backward(Tensor::zeros({2, 2, 3, 3}));
  EXPECT_THROW(bn.backward(Tensor::zeros({2, 2, 3, 3})), std::logic_error);
}

// Two identical replicas (every sum doubled) compute what one layer computes on the batch
// twice over: y, dx and the running statistics, with the local weight and bias gradients
// (the reducer averages them), and one sum per pass, named.
TEST(BatchNorm, SyncedStatisticsAreTheConcatenatedBatchs) {
  const int64_t c = 3;
  const Shape shape{2, c, 2, 2};
  const Tensor x = random_tensor(shape, 50, 1.5f, 0.5f), dy = random_tensor(shape, 51);
  std::vector<float> x2 = x.to_vector(), dy2 = dy.to_vector();
  x2.insert(x2.end(), x2.begin(), x2.end());
  dy2.insert(dy2.end(), dy2.begin(), dy2.end());

  BatchNorm synced(BatchNormKind::d2, c), whole(BatchNormKind::d2, c);
  synced.set_prefix("bn1");
  whole.set_prefix("bn1");
  randomise_affine(synced, 52);
  randomise_affine(whole, 52);
  auto sum = std::make_shared<ReplicatedSum>(2);
  synced.set_sync(sum);
  EXPECT_TRUE(synced.synced());
  const std::vector<float> y = synced.forward(x).to_vector();
  const std::vector<float> dx = synced.backward(dy).to_vector();
  const std::vector<float> yw = whole.forward(Tensor::from_vector(x2, {4, c, 2, 2})).to_vector();
  const std::vector<float> dxw = whole.backward(Tensor::from_vector(dy2, {4, c, 2, 2})).to_vector();
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y[i], yw[i], 1e-6) << i;
    EXPECT_NEAR(dx[i], dxw[i], 1e-6) << i;
  }
  for (int b = 0; b < 2; ++b) {
    EXPECT_LT(relative_error(synced.buffers()[b]->value.to_vector(), whole.buffers()[b]->value.to_vector()), 1e-6)
        << synced.buffers()[b]->name;
    const std::vector<float> g = synced.parameters()[b]->grad.to_vector(), gw = whole.parameters()[b]->grad.to_vector();
    for (int64_t ch = 0; ch < c; ++ch) EXPECT_NEAR(2 * g[ch], gw[ch], 1e-5) << b;
  }
  ASSERT_EQ(sum->calls.size(), 2u);
  EXPECT_EQ(sum->calls[0], "BatchNorm2d bn1 forward statistics");
  EXPECT_EQ(sum->calls[1], "BatchNorm2d bn1 backward gradient sums");
  // One value per channel here, but two over the replicas: allowed, as SyncBatchNorm.
  EXPECT_EQ(synced.forward(random_tensor({1, c, 1, 1}, 53)).numel(), c);
  // Evaluation uses the running statistics: no sum.
  synced.set_training(false);
  synced.forward(x);
  EXPECT_EQ(sum->calls.size(), 3u);
}

TEST(BatchNormReference, MatchesPyTorch) {
  const std::map<std::string, Tensor> ref = read_reference();
  struct Case {
    const char* key;
    BatchNormKind kind;
    int64_t channels;
    BatchNormOptions options;
    int steps;
  };
  for (const Case& cs : {Case{"bn2d", BatchNormKind::d2, 3, {1e-5f, 0.1f, true}, 3},
                         Case{"bn1d", BatchNormKind::d1, 4, {1e-5f, 0.1f, true}, 2},
                         Case{"noaffine", BatchNormKind::d2, 2, {1e-3f, 0.3f, false}, 2}}) {
    SCOPED_TRACE(cs.key);
    const std::string key = cs.key;
    auto at = [&](const std::string& name) -> const Tensor& {
      auto it = ref.find(key + "." + name);
      if (it == ref.end()) throw std::runtime_error("the reference has no " + key + "." + name);
      return it->second;
    };
    BatchNorm bn(cs.kind, cs.channels, cs.options);
    bn.set_prefix(key);
    if (cs.options.affine) {
      bn.parameters()[0]->value.copy_from(at("weight"));
      bn.parameters()[1]->value.copy_from(at("bias"));
    }
    for (int k = 0; k < cs.steps; ++k) {
      const std::string p = "step" + std::to_string(k) + ".";
      SCOPED_TRACE(p);
      zero_grads(bn);
      const Tensor y = bn.forward(at(p + "input"));
      EXPECT_LT(relative_error(y.to_vector(), at(p + "output").to_vector()), 1e-5) << "output";
      const Tensor dx = bn.backward(at(p + "grad_output"));
      EXPECT_LT(relative_error(dx.to_vector(), at(p + "grad_input").to_vector()), 1e-5) << "grad_input";
      if (cs.options.affine) {
        EXPECT_LT(relative_error(bn.parameters()[0]->grad.to_vector(), at(p + "grad_weight").to_vector()), 1e-5)
            << "grad_weight";
        EXPECT_LT(relative_error(bn.parameters()[1]->grad.to_vector(), at(p + "grad_bias").to_vector()), 1e-5)
            << "grad_bias";
      }
      EXPECT_LT(relative_error(bn.buffers()[0]->value.to_vector(), at(p + "running_mean").to_vector()), 1e-6)
          << "running_mean";
      EXPECT_LT(relative_error(bn.buffers()[1]->value.to_vector(), at(p + "running_var").to_vector()), 1e-6)
          << "running_var";
      EXPECT_EQ(tracked(bn), at(p + "num_batches_tracked").data<int64_t>()[0]) << "num_batches_tracked";
    }
    bn.set_training(false);
    const Tensor y = bn.forward(at("eval.input"));
    EXPECT_LT(relative_error(y.to_vector(), at("eval.output").to_vector()), 1e-5) << "eval output";
  }
}
