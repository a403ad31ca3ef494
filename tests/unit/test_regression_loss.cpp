// The regression losses and metrics (runtime/layers/regression_loss.h) on the CPU:
//  - against PyTorch (tests/data/loss_reference.safetensors, written by
//    scripts/make-loss-reference): sum / rows within 1e-6 relative of torch's mean loss,
//    and backward(1 / rows) within 1e-6 relative of torch's input gradient, element by
//    element (plus 1e-12 absolute, for the gradients that are 0 or 4e-15 at logits +-30);
//  - backward(1) against central finite differences of the forward's sum (the method
//    and tolerances of tests/unit/test_layers_gradcheck.cpp);
//  - the metrics' exact values on hand-made data whose every sum is exact in float;
//  - buffer reuse: no allocation per step once warm, and the model's output buffer free
//    again after forward;
//  - errors that name the loss, the tensor and the shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/layers/regression_loss.h"

using namespace tandem;

namespace {

std::map<std::string, Tensor> read_reference() {
  const std::string path = std::string(TANDEM_TEST_DATA_DIR) + "/loss_reference.safetensors";
  SafetensorsHeader header = read_safetensors_header(path);
  std::map<std::string, Tensor> tensors;
  for (const SafetensorsEntry& e : header.tensors) tensors[e.name] = Tensor::empty(e.shape, e.dtype);
  read_safetensors_data(path, header, &tensors);
  return tensors;
}

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

double mean_loss(Loss& loss, const Tensor& pred, const Tensor& target) {
  const Tensor outputs[] = {pred};
  const Tensor targets[] = {target};
  LossSum s = loss.forward(outputs, targets);
  return s.sum->get() / static_cast<double>(s.rows);
}

// Every case <prefix>.<key> of the dump through `loss`: value and gradient against torch's.
void expect_matches_torch(Loss& loss, const std::string& prefix) {
  const std::map<std::string, Tensor> ref = read_reference();
  for (const char* key : {"a", "b", "c"}) {
    const std::string name = prefix + "." + key;
    ASSERT_TRUE(ref.count(name + ".input")) << "the reference has no " << name;
    const Tensor& input = ref.at(name + ".input");
    const Tensor outputs[] = {input};
    const Tensor targets[] = {ref.at(name + ".target")};
    LossSum s = loss.forward(outputs, targets);
    EXPECT_EQ(s.rows, input.dim(0)) << name;
    const double got = s.sum->get() / static_cast<double>(s.rows);
    const double want = ref.at(name + ".loss").to_vector()[0];
    EXPECT_NEAR(got, want, 1e-6 * std::fabs(want)) << name << " loss";
    const Tensor grad = loss.backward(1.f / static_cast<float>(s.rows))[0];
    ASSERT_EQ(grad.shape(), input.shape()) << name;
    const std::vector<float> g = grad.to_vector(), w = ref.at(name + ".grad").to_vector();
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_NEAR(g[i], w[i], 1e-6 * std::fabs(w[i]) + 1e-12) << name << " grad[" << i << "]";
  }
}

// d(sum of row losses)/d(pred) against backward(1), by central differences.
void gradcheck(Loss& loss, Tensor pred, const Tensor& target) {
  constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 1e-2;
  const Tensor outputs[] = {pred};
  const Tensor targets[] = {target};
  loss.forward(outputs, targets);
  const std::vector<float> analytic = loss.backward(1.f)[0].to_vector();
  auto sum = [&] { return loss.forward(outputs, targets).sum->get(); };
  float* p = pred.f32();
  for (size_t i = 0; i < analytic.size(); ++i) {
    const float saved = p[i];
    const float hi = static_cast<float>(saved + kEps), lo = static_cast<float>(saved - kEps);
    p[i] = hi;
    const double lp = sum();
    p[i] = lo;
    const double lm = sum();
    p[i] = saved;
    const double numeric = (lp - lm) / (static_cast<double>(hi) - lo);
    ASSERT_NEAR(numeric, analytic[i], kAtol + kRtol * std::fabs(analytic[i])) << loss.name() << "[" << i << "]";
  }
}

// The message of the std::invalid_argument that `f` throws ("no throw" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no throw";
}

}  // namespace

TEST(RegressionLoss, MseMatchesPyTorch) {
  MeanSquaredError mse;
  EXPECT_EQ(mse.name(), "mse");
  expect_matches_torch(mse, "mse");
}

TEST(RegressionLoss, BceWithLogitsMatchesPyTorchIncludingLogitsOfThirtyAndAHundred) {
  BceWithLogits bce;
  EXPECT_EQ(bce.name(), "bce_with_logits");
  expect_matches_torch(bce, "bce");
}

TEST(RegressionLoss, GradientsMatchFiniteDifferences) {
  MeanSquaredError mse;
  gradcheck(mse, random_tensor({4, 5}, 1), random_tensor({4, 5}, 2));
  gradcheck(mse, random_tensor({3, 2, 2}, 3), random_tensor({3, 2, 2}, 4));
  BceWithLogits bce;
  std::vector<float> t(20);
  std::mt19937 rng(5);
  for (float& v : t) v = std::uniform_real_distribution<float>(0.f, 1.f)(rng);
  gradcheck(bce, random_tensor({4, 5}, 6, 3.f), Tensor::from_vector(t, {4, 5}));
  gradcheck(bce, random_tensor({5}, 7, 3.f), Tensor::from_vector({0, 1, 1, 0, 0.5f}, {5}));
}

// A row's loss is the mean over its elements, the sum adds rows, and backward's scale
// multiplies the gradient of that sum: values chosen so that every result is exact.
TEST(RegressionLoss, RowLossesAreMeansAndScaleIsApplied) {
  MeanSquaredError mse;
  // Rows of squared errors {1, 4} and {0, 16}: row means 2.5 and 8, sum 10.5, all exact.
  const Tensor pred = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  const Tensor target = Tensor::from_vector({0, 0, 3, 0}, {2, 2});
  const Tensor outputs[] = {pred};
  const Tensor targets[] = {target};
  LossSum s = mse.forward(outputs, targets);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.sum->get(), 10.5);
  // d(0.5 * sum)/dpred = 0.5 * 2 * (pred - target) / 2.
  EXPECT_EQ(mse.backward(0.5f)[0].to_vector(), (std::vector<float>{0.5f, 1.f, 0.f, 2.f}));
  BceWithLogits bce;
  const Tensor zero = Tensor::from_vector({0, 0}, {1, 2});
  const Tensor half = Tensor::from_vector({0.5f, 1}, {1, 2});
  EXPECT_NEAR(mean_loss(bce, zero, half), std::log(2.0), 1e-7);  // x = 0: log 2 whatever t
  EXPECT_EQ(bce.backward(1.f)[0].to_vector(), (std::vector<float>{0.f, -0.25f}));  // (0.5 - t) / 2
}

TEST(RegressionLoss, BuffersAreReusedAndTheOutputIsNotHeld) {
  for (int which = 0; which < 2; ++which) {
    MeanSquaredError mse;
    BceWithLogits bce;
    Loss& loss = which == 0 ? static_cast<Loss&>(mse) : bce;
    const float* first_grad = nullptr;
    for (int step = 0; step < 3; ++step) {
      const Tensor outputs[] = {random_tensor({6, 4}, 10 + step)};
      const Tensor targets[] = {random_tensor({6, 4}, 20 + step)};
      loss.forward(outputs, targets);
      // Forward copied the output: the model's buffer is the caller's alone again.
      EXPECT_EQ(outputs[0].storage().use_count(), 1) << loss.name();
      const float* grad = loss.backward(0.25f)[0].f32();
      if (step == 0) first_grad = grad;
      EXPECT_EQ(grad, first_grad) << loss.name() << " step " << step << ": a new gradient buffer";
    }
  }
}

TEST(RegressionLoss, EmptyBatchHasNoRows) {
  MeanSquaredError mse;
  const Tensor outputs[] = {Tensor::empty({0, 3})};
  const Tensor targets[] = {Tensor::empty({0, 3})};
  LossSum s = mse.forward(outputs, targets);
  EXPECT_EQ(s.rows, 0);
  EXPECT_EQ(s.sum->get(), 0.0);
  EXPECT_EQ(mse.backward(1.f)[0].shape(), (Shape{0, 3}));
}

TEST(RegressionLoss, MseMetricIsTheMeanOverEveryElement) {
  MeanSquaredErrorMetric m;
  EXPECT_EQ(m.name(), "mse");
  EXPECT_EQ(m.value(), 0.0);
  // Batch 1: squared errors {1, 4, 0, 16} (rows of 2); batch 2: {9, 1, 4, 2.25} (one row of 4).
  const Tensor o1[] = {Tensor::from_vector({1, 2, 3, 4}, {2, 2})};
  const Tensor t1[] = {Tensor::from_vector({0, 0, 3, 0}, {2, 2})};
  m.add(o1, t1);
  EXPECT_EQ(m.value(), 21.0 / 4);
  const Tensor o2[] = {Tensor::from_vector({3, 1, 0.5f, -1}, {1, 4})};
  const Tensor t2[] = {Tensor::from_vector({0, 2, 2.5f, 0.5f}, {1, 4})};
  m.add(o2, t2);
  EXPECT_EQ(m.value(), (21.0 + 16.25) / 8);  // elements, not rows, weigh
  m.reset();
  EXPECT_EQ(m.value(), 0.0);
}

TEST(RegressionLoss, BinaryAccuracyComparesSignsWithTargetsAboveOneHalf) {
  BinaryAccuracy m;
  EXPECT_EQ(m.name(), "binary_accuracy");
  EXPECT_EQ(m.value(), 0.0);
  // logit > 0 against target > 0.5: a logit of exactly 0 predicts 0, a target of 0.5 is 0.
  const Tensor o1[] = {Tensor::from_vector({2, -1, 0, 0.5f, -3, 1}, {2, 3})};
  const Tensor t1[] = {Tensor::from_vector({1, 0, 0.5f, 0.9f, 1, 0.5f}, {2, 3})};
  m.add(o1, t1);  // right, right, right, right, wrong, wrong
  EXPECT_EQ(m.value(), 4.0 / 6);
  const Tensor o2[] = {Tensor::from_vector({-5, 7}, {2})};
  const Tensor t2[] = {Tensor::from_vector({0, 0}, {2})};
  m.add(o2, t2);  // right, wrong
  EXPECT_EQ(m.value(), 5.0 / 8);
  m.reset();
  EXPECT_EQ(m.value(), 0.0);
}

TEST(RegressionLoss, ErrorsNameTheLossTheTensorAndTheShapes) {
  MeanSquaredError mse;
  BceWithLogits bce;
  const Tensor pred = random_tensor({5, 3}, 1);
  auto run = [](Loss& loss, std::vector<Tensor> outputs, std::vector<Tensor> targets) {
    return error_of([&] { loss.forward(outputs, targets); });
  };
  auto contains = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string e = run(mse, {pred}, {random_tensor({5, 2}, 2)});
  EXPECT_TRUE(contains(e, "MeanSquaredError: target 0 must be [5, 3] to match output 0, got [5, 2]")) << e;
  e = run(bce, {pred}, {random_tensor({15}, 2)});
  EXPECT_TRUE(contains(e, "BceWithLogits: target 0 must be [5, 3]")) << e;
  EXPECT_TRUE(contains(e, "got [15]")) << e;
  e = run(mse, {Tensor::zeros({5, 3}, DType::i32)}, {pred});
  EXPECT_TRUE(contains(e, "MeanSquaredError: output 0 must be f32, got i32")) << e;
  e = run(bce, {pred}, {Tensor::zeros({5, 3}, DType::i32)});
  EXPECT_TRUE(contains(e, "BceWithLogits: target 0 must be f32, got i32")) << e;
  e = run(mse, {}, {pred});
  EXPECT_TRUE(contains(e, "MeanSquaredError: reads output 0 but the model returned no outputs")) << e;
  e = run(bce, {pred}, {});
  EXPECT_TRUE(contains(e, "BceWithLogits: reads target 0 but the batch holds no targets")) << e;
  e = run(mse, {pred}, {Tensor()});
  EXPECT_TRUE(contains(e, "MeanSquaredError: target 0 is undefined")) << e;
  e = run(mse, {Tensor::empty({4, 0})}, {Tensor::empty({4, 0})});
  EXPECT_TRUE(contains(e, "at least one element per row, got [4, 0]")) << e;
  // The metrics check alike, under their own names.
  MeanSquaredErrorMetric mm;
  const Tensor o[] = {pred};
  const Tensor t[] = {random_tensor({3, 5}, 3)};
  e = error_of([&] { mm.add(o, t); });
  EXPECT_TRUE(contains(e, "MeanSquaredErrorMetric: target 0 must be [5, 3] to match output 0, got [3, 5]")) << e;
  BinaryAccuracy ba;
  e = error_of([&] { ba.add(o, t); });
  EXPECT_TRUE(contains(e, "BinaryAccuracy: target 0 must be [5, 3]")) << e;
  // A failed forward leaves nothing for backward, even after a good one.
  EXPECT_EQ(run(mse, {pred}, {pred}), "no throw");
  run(mse, {pred}, {Tensor()});
  EXPECT_THROW(mse.backward(1.f), std::logic_error);
}
