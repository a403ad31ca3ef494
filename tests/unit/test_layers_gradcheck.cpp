// Every layer's backward against central finite differences of its forward, plus the
// Model contracts the DDP reducer relies on: the grad-ready hook order, accumulation
// into Parameter::grad, writes through a rebound grad view, deterministic init.
//
// Method: for a layer y = f(x; theta) and a fixed random r, the scalar L = sum(y * r)
// (accumulated in double) has dL/dy = r, so backward(r) must return dL/dx and add
// dL/dtheta. Each element is perturbed by +-eps and (L+ - L-) / (x+ - x-) compared,
// where x+- are the float values actually stored (so eps's own rounding is exact).
//
// Tolerance |numeric - analytic| <= atol + rtol * |analytic|, with eps = 1e-2:
//  - rounding: the forward runs in float, so L carries ~ sqrt(n) * 2^-24 * |y||r|
//    ~ 1e-6 of noise for the n <= ~500 outputs used; divided by 2*eps that is ~5e-5,
//    which atol = 1e-3 covers 20x over;
//  - truncation: central differences err by eps^2/6 * f''' ~ 2e-5 * f''' for the smooth
//    layers (GELU, LayerNorm, softmax) and 0 for the piecewise-linear ones, provided no
//    kink lies within eps of an input (ReLU inputs are kept >= 0.1 from 0, MaxPool inputs
//    are distinct and >= 0.05 apart), so rtol = 1e-2 is generous, while any real
//    indexing or formula error shows up as an O(1) relative mismatch.
#include <gtest/gtest.h>

#include "tests/support/finite_differences.h"

#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/model.h"

namespace tandem {
namespace {

using testing::gradcheck;
using testing::randn;
using testing::random_tensor;
using testing::zero_grads;
using testing::kAtol;
using testing::kEps;
using testing::kRtol;

void gradcheck(Module& m, const Tensor& x, uint32_t seed) {
  m.set_prefix(m.kind());
  m.reset_parameters(seed);
  gradcheck([&](const Tensor& t) { return m.forward(t); },
            [&](const Tensor& d) { return m.backward(d); }, m.parameters(), x, seed + 1);
}

// Keeps every value at least `gap` from 0, where ReLU's derivative jumps.
Tensor away_from_zero(Tensor t, float gap) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::fabs(p[i]) < gap) p[i] = p[i] < 0 ? p[i] - gap : p[i] + gap;
  return t;
}

TEST(LayerGradcheck, Linear) {
  Linear fc(5, 4);
  gradcheck(fc, random_tensor({3, 5}, 1), 10);
  Linear no_bias(5, 4, false);
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  gradcheck(no_bias, random_tensor({2, 3, 5}, 2), 11);  // leading dims are batch dims
}

TEST(LayerGradcheck, Activations) {
  ReLU relu;
  gradcheck(relu, away_from_zero(random_tensor({4, 7}, 3), 0.1f), 12);
  GELU gelu;
  gradcheck(gelu, random_tensor({2, 3, 5}, 4), 13);
}

TEST(LayerGradcheck, Conv2dStridePaddingOddShapes) {
  Conv2d conv(3, 4, 3, 2, 1);  // C=3, H=7, W=5, k=3, stride 2, padding 1: OH=4, OW=3
  gradcheck(conv, random_tensor({2, 3, 7, 5}, 5), 14);
  Conv2d recompute(3, 4, 3, 2, 1);
  recompute.set_saved_columns_limit(0);  // backward rebuilds the columns image by image
  gradcheck(recompute, random_tensor({2, 3, 7, 5}, 5), 14);
  Conv2d same(2, 3, 3, 1, 1);
  gradcheck(same, random_tensor({2, 2, 4, 6}, 6), 15);
  Conv2d pointwise(3, 2, 1);  // 1x1, stride 1: the image is its own column matrix
  gradcheck(pointwise, random_tensor({2, 3, 3, 4}, 7), 16);
  Conv2d wide(1, 2, 2, 3, 0);  // stride > kernel skips input pixels
  gradcheck(wide, random_tensor({1, 1, 8, 7}, 8), 17);
  // Stride 1 without padding, and a padding smaller than "same" on a 5x5 kernel.
  Conv2d valid(2, 3, 3, 1, 0, false);
  gradcheck(valid, random_tensor({2, 2, 6, 5}, 9), 18);
  Conv2d narrow(2, 3, 5, 1, 1);
  gradcheck(narrow, random_tensor({2, 2, 7, 6}, 10), 19);
}

// Batches cut into several chunks (2 + 1 images: a batched chunk and a single-image one),
// with the columns kept from forward and rebuilt in backward; stride 1 and 2.
TEST(LayerGradcheck, Conv2dChunkedBatch) {
  // A chunk limit of two images' max(C*k*k, OC) * OH*OW floats.
  for (size_t saved : {size_t{256} << 20, size_t{0}}) {
    Conv2d conv(3, 4, 3, 2, 1);  // 7x5 -> OH=4, OW=3; C*k*k = 27
    conv.set_chunk_limit(2 * 27 * 4 * 3 * sizeof(float));
    conv.set_saved_columns_limit(saved);
    gradcheck(conv, random_tensor({3, 3, 7, 5}, 30), 31);
    Conv2d same(2, 3, 3, 1, 1);  // 4x4 -> 4x4; C*k*k = 18 > OC = 3
    same.set_chunk_limit(2 * 18 * 16 * sizeof(float));
    same.set_saved_columns_limit(saved);
    gradcheck(same, random_tensor({3, 2, 4, 4}, 32), 33);
    Conv2d pointwise(2, 3, 1);  // 1x1: OC = 3 > C*k*k = 2 sets the chunk size
    pointwise.set_chunk_limit(2 * 3 * 12 * sizeof(float));
    pointwise.set_saved_columns_limit(saved);
    gradcheck(pointwise, random_tensor({3, 2, 4, 3}, 34), 35);
  }
}

// A batched forward (any chunking) gives what the per-image one gives, up to GEMM rounding.
TEST(LayerGradcheck, Conv2dChunkingDoesNotChangeResults) {
  auto run = [](size_t chunk_limit) {
    Conv2d conv(3, 5, 3, 1, 1);
    conv.set_prefix("c");
    conv.reset_parameters(4);
    conv.set_chunk_limit(chunk_limit);
    const Tensor y = conv.forward(random_tensor({5, 3, 6, 7}, 36));
    const Tensor dx = conv.backward(random_tensor(y.shape(), 37));
    std::vector<float> out = y.to_vector(), d = dx.to_vector();
    out.insert(out.end(), d.begin(), d.end());
    for (Parameter* p : conv.parameters()) {
      const auto g = p->grad.to_vector();
      out.insert(out.end(), g.begin(), g.end());
    }
    return out;
  };
  const auto one = run(0), all = run(size_t{256} << 20), some = run(2 * 27 * 42 * sizeof(float));
  ASSERT_EQ(one.size(), all.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(all[i], one[i], 1e-5 * (1 + std::fabs(one[i]))) << "one chunk vs per image at " << i;
    EXPECT_NEAR(some[i], one[i], 1e-5 * (1 + std::fabs(one[i]))) << "chunks of 2 vs per image at " << i;
  }
}

TEST(LayerGradcheck, Conv2dOutputMatchesDirectSum) {
  Conv2d conv(2, 3, 3, 2, 1);
  conv.set_prefix("c");
  conv.reset_parameters(3);
  const Tensor x = random_tensor({2, 2, 5, 4}, 9);
  const Tensor y = conv.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 2}));
  const auto xv = x.to_vector(), yv = y.to_vector();
  const auto wv = conv.parameters()[0]->value.to_vector(), bv = conv.parameters()[1]->value.to_vector();
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 3; ++o)
      for (int oy = 0; oy < 3; ++oy)
        for (int ox = 0; ox < 2; ++ox) {
          double s = bv[o];
          for (int c = 0; c < 2; ++c)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 3; ++kj) {
                const int iy = oy * 2 - 1 + ki, ix = ox * 2 - 1 + kj;
                if (iy < 0 || iy >= 5 || ix < 0 || ix >= 4) continue;
                s += double(wv[((o * 2 + c) * 3 + ki) * 3 + kj]) * xv[((n * 2 + c) * 5 + iy) * 4 + ix];
              }
          EXPECT_NEAR(yv[((n * 3 + o) * 3 + oy) * 2 + ox], s, 1e-5);
        }
}

TEST(LayerGradcheck, MaxPoolDistinctValues) {
  // Values spaced 0.05 apart in shuffled order: a +-1e-2 step never changes a window's max.
  // k = 2 and 3 run unrolled kernels, k = 4 the generic one.
  for (auto [k, s] : {std::pair<int64_t, int64_t>{2, 0}, {3, 2}, {2, 1}, {4, 3}}) {
    const Shape shape{2, 2, 7, 5};
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    std::iota(v.begin(), v.end(), 0.f);
    std::shuffle(v.begin(), v.end(), std::mt19937(21));
    for (float& f : v) f = f * 0.05f - 3.f;
    MaxPool2d pool(k, s);
    gradcheck(pool, Tensor::from_vector(v, shape), 18);
  }
}

TEST(LayerGradcheck, LayerNormAndFlatten) {
  LayerNorm ln(6);
  ln.set_prefix("ln");
  // Non-trivial gamma/beta so their gradients and their effect on dx are both exercised.
  ln.parameters()[0]->value.copy_from(random_tensor({6}, 30));
  ln.parameters()[1]->value.copy_from(random_tensor({6}, 31));
  gradcheck([&](const Tensor& t) { return ln.forward(t); },
            [&](const Tensor& d) { return ln.backward(d); }, ln.parameters(),
            random_tensor({2, 3, 6}, 19), 20);
  Flatten flat;
  const Tensor x = random_tensor({2, 3, 2, 2}, 22);
  const Tensor y = flat.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_TRUE(y.shares_storage_with(x));
  gradcheck(flat, x, 23);
}

TEST(LayerGradcheck, DropoutGradientIsTheMask) {
  Dropout drop(0.4f, 99);
  const Tensor ones = Tensor::from_vector(std::vector<float>(1000, 1.f), {10, 100});
  const auto mask = drop.forward(ones).to_vector();  // with x = 1, y is the mask itself
  const auto dy = randn(1000, 24);
  const auto dx = drop.backward(Tensor::from_vector(dy, {10, 100})).to_vector();
  int kept = 0;
  for (size_t i = 0; i < dx.size(); ++i) {
    ASSERT_TRUE(mask[i] == 0.f || std::fabs(mask[i] - 1.f / 0.6f) < 1e-6f);
    EXPECT_EQ(dx[i], dy[i] * mask[i]);
    kept += mask[i] != 0.f;
  }
  EXPECT_GT(kept, 450);
  EXPECT_LT(kept, 750);
  // The next step draws a different mask; a fresh layer with the same seed replays both.
  const auto mask2 = drop.forward(ones).to_vector();
  EXPECT_NE(mask, mask2);
  Dropout replay(0.4f, 99);
  EXPECT_EQ(replay.forward(ones).to_vector(), mask);
  EXPECT_EQ(replay.forward(ones).to_vector(), mask2);
  // Eval: the identity, gradient included.
  drop.set_training(false);
  const Tensor y = drop.forward(ones);
  EXPECT_TRUE(y.shares_storage_with(ones));
  EXPECT_EQ(drop.backward(Tensor::from_vector(dy, {10, 100})).to_vector(), dy);
}

TEST(LayerGradcheck, SoftmaxCrossEntropyMeanLoss) {
  const Shape shape{4, 5};
  Tensor logits = random_tensor(shape, 25);
  const std::vector<float> lv = {0, 3, 4, 1};
  Tensor labels = Tensor::from_vector(lv, {4}).to(Device::cpu());
  Tensor labels_i32 = Tensor::empty({4}, DType::i32);
  for (int i = 0; i < 4; ++i) labels_i32.data<int32_t>()[i] = static_cast<int32_t>(lv[i]);
  SoftmaxCrossEntropy loss;
  loss.forward(logits, labels_i32);
  const auto analytic = loss.dlogits(1.f / 4).to_vector();
  for (int64_t i = 0; i < logits.numel(); ++i) {
    float* p = logits.f32() + i;
    const float saved = *p, hi = saved + static_cast<float>(kEps), lo = saved - static_cast<float>(kEps);
    *p = hi;
    const double lp = loss.forward(logits, labels_i32);
    *p = lo;
    const double lm = loss.forward(logits, labels_i32);
    *p = saved;
    EXPECT_NEAR((lp - lm) / (double(hi) - lo), analytic[i], kAtol + kRtol * std::fabs(analytic[i])) << i;
  }
  // Mean loss against a direct computation, and accuracy with the first max on ties.
  const auto l = logits.to_vector();
  double want = 0;
  for (int r = 0; r < 4; ++r) {
    double mx = -1e30, s = 0;
    for (int c = 0; c < 5; ++c) mx = std::max(mx, double(l[r * 5 + c]));
    for (int c = 0; c < 5; ++c) s += std::exp(l[r * 5 + c] - mx);
    want += std::log(s) + mx - l[r * 5 + static_cast<int>(lv[r])];
  }
  EXPECT_NEAR(loss.forward(logits, labels_i32), want / 4, 1e-6);
  Tensor tied = Tensor::from_vector({1, 1, 0, 0, 2, 2}, {2, 3});
  Tensor lab = Tensor::empty({2}, DType::i32);
  lab.data<int32_t>()[0] = 0;
  lab.data<int32_t>()[1] = 2;
  EXPECT_EQ(SoftmaxCrossEntropy::count_correct(tied, lab), 1);
  EXPECT_THROW(loss.forward(logits, labels), std::invalid_argument);  // f32 labels
  EXPECT_THROW(loss.forward(logits, lab), std::invalid_argument);     // 2 labels for 4 rows
}

TEST(LayerGradcheck, ShapeErrorsNameTheLayer) {
  Linear fc(5, 4);
  try {
    fc.forward(random_tensor({3, 6}, 1));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 6]"), std::string::npos) << e.what();
  }
  Conv2d conv(3, 4, 3);
  EXPECT_THROW(conv.forward(random_tensor({1, 2, 5, 5}, 1)), std::invalid_argument);
  EXPECT_THROW(conv.forward(random_tensor({1, 3, 2, 5}, 1)), std::invalid_argument);  // smaller than k
  MaxPool2d pool(2);
  EXPECT_THROW(pool.forward(random_tensor({3, 4}, 1)), std::invalid_argument);
  LayerNorm ln(4);
  EXPECT_THROW(ln.forward(random_tensor({2, 5}, 1)), std::invalid_argument);
  fc.forward(random_tensor({3, 5}, 1));
  EXPECT_THROW(fc.backward(random_tensor({3, 5}, 1)), std::invalid_argument);
  ReLU relu;
  EXPECT_THROW(relu.backward(random_tensor({3, 5}, 1)), std::logic_error);  // no forward
}

std::unique_ptr<Model> small_mlp(uint64_t seed) {
  auto m = std::make_unique<Model>();
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(6, 5));
  m->add("act", std::make_unique<GELU>());
  m->add("norm", std::make_unique<LayerNorm>(5));
  m->add("fc2", std::make_unique<Linear>(5, 3));
  m->reset_parameters(seed);
  return m;
}

TEST(ModelGradients, WholeModelGradcheck) {
  auto m = small_mlp(5);
  // The model's input gradient is checked too, so the leading layers must produce it.
  for (size_t i = 0; i < m->layer_count(); ++i) m->layer(i).set_needs_input_grad(true);
  gradcheck([&](const Tensor& t) { return m->forward(t); },
            [&](const Tensor& d) { return m->backward(d); }, m->parameters(),
            random_tensor({3, 2, 3}, 26), 27);
}

TEST(ModelGradients, HookFiresPerParameterInReverseLayerOrder) {
  auto m = small_mlp(1);
  std::vector<std::string> fired;
  m->set_grad_ready_hook([&](Parameter& p) { fired.push_back(p.name); });
  m->zero_grad();
  m->forward(random_tensor({2, 6}, 3));
  m->backward(random_tensor({2, 3}, 4));
  EXPECT_EQ(fired, (std::vector<std::string>{"fc2.bias", "fc2.weight", "norm.bias", "norm.weight",
                                             "fc1.bias", "fc1.weight"}));
}

TEST(ModelGradients, AccumulateAndWriteThroughReboundViews) {
  auto a = small_mlp(7), b = small_mlp(7);
  const Tensor x = random_tensor({4, 6}, 5), dy = random_tensor({4, 3}, 6);
  a->zero_grad();
  a->forward(x);
  a->backward(dy);
  std::vector<std::vector<float>> once;
  for (Parameter* p : a->parameters()) once.push_back(p->grad.to_vector());
  a->forward(x);
  a->backward(dy);  // a second backward adds
  for (size_t i = 0; i < once.size(); ++i) {
    const auto twice = a->parameters()[i]->grad.to_vector();
    for (size_t j = 0; j < twice.size(); ++j)
      EXPECT_NEAR(twice[j], 2 * once[i][j], 1e-6 * (1 + std::fabs(once[i][j])));
  }
  // Rebind b's grads to views of one flat buffer (with gaps holding a sentinel), as the
  // DDP reducer does, and check backward writes through them and nowhere else.
  const int64_t gap = 3;
  Tensor flat = Tensor::from_vector(
      std::vector<float>(b->num_parameters() + gap * (b->parameters().size() + 1), -7.f),
      {b->num_parameters() + gap * int64_t(b->parameters().size() + 1)});
  std::vector<int64_t> offsets;
  int64_t off = gap;
  for (Parameter* p : b->parameters()) {
    p->grad = flat.view(off, p->value.shape());
    offsets.push_back(off);
    off += p->value.numel() + gap;
  }
  b->zero_grad();
  b->forward(x);
  b->backward(dy);
  const auto fv = flat.to_vector();
  for (size_t i = 0; i < once.size(); ++i) {
    for (size_t j = 0; j < once[i].size(); ++j) EXPECT_NEAR(fv[offsets[i] + j], once[i][j], 1e-6f);
    for (int64_t g = 1; g <= gap; ++g) EXPECT_EQ(fv[offsets[i] - g], -7.f);
  }
}

TEST(ModelGradients, SkippedInputGradientLeavesParameterGradientsUnchanged) {
  auto a = small_mlp(8), b = small_mlp(8);
  for (size_t i = 0; i < a->layer_count(); ++i) a->layer(i).set_needs_input_grad(true);
  b->layer(0).set_needs_input_grad(false);
  b->layer(1).set_needs_input_grad(false);
  const Tensor x = random_tensor({4, 6}, 9), dy = random_tensor({4, 3}, 10);
  a->zero_grad();
  b->zero_grad();
  a->forward(x);
  EXPECT_TRUE(a->backward(dy).defined());
  b->forward(x);
  EXPECT_FALSE(b->backward(dy).defined());
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_EQ(a->parameters()[i]->grad.to_vector(), b->parameters()[i]->grad.to_vector());
}

TEST(ModelGradients, InitIsDeterministicPerSeedAndWithinPytorchBounds) {
  EXPECT_EQ(parameter_checksum(*small_mlp(1)), parameter_checksum(*small_mlp(1)));
  EXPECT_NE(parameter_checksum(*small_mlp(1)), parameter_checksum(*small_mlp(2)));
  auto m = small_mlp(3);
  for (float w : m->find("fc1.weight")->value.to_vector()) EXPECT_LE(std::fabs(w), 1 / std::sqrt(6.f));
  for (float w : m->find("fc2.bias")->value.to_vector()) EXPECT_LE(std::fabs(w), 1 / std::sqrt(5.f));
  for (float w : m->find("norm.weight")->value.to_vector()) EXPECT_EQ(w, 1.f);
  // Different parameters draw different streams (the name is part of the seed).
  EXPECT_NE(m->find("fc1.bias")->value.to_vector()[0], m->find("fc1.weight")->value.to_vector()[0]);
  Conv2d conv(3, 2, 3);
  conv.set_prefix("conv");
  conv.reset_parameters(4);
  for (float w : conv.parameters()[0]->value.to_vector()) EXPECT_LE(std::fabs(w), 1 / std::sqrt(27.f));
}

}  // namespace
}  // namespace tandem
