// The zoo's ResNet (zoo/resnet.h) and its head, GlobalAvgPool, on the CPU: names and
// shapes against torchvision's state dict, the parameter count, torchvision's init, the
// checks that name the flag at fault, finite-difference gradients of a whole tiny ResNet
// (BatchNorm in training mode), the gradient-ready contract the DDP reducer relies on, and
// activation checkpointing changing no bit of the gradients.
//
// Parameter count of ResNet-20, width 16, 10 classes (convs without bias, BN weight + bias):
//   conv1 16*C*9, bn1 32
//   layer1  3 blocks x (2 x 16*16*9 + 2 x 32)                               = 14,016
//   layer2  block 0: 32*16*9 + 32*32*9 + 2 x 64 + downsample 32*16 + 64    = 14,528
//           blocks 1, 2: 2 x (2 x 32*32*9 + 2 x 64)                        = 37,120
//   layer3  block 0: 64*32*9 + 64*64*9 + 2 x 128 + downsample 64*32 + 128  = 57,728
//           blocks 1, 2: 2 x (2 x 64*64*9 + 2 x 128)                       = 147,968
//   fc      64*10 + 10                                                     = 650
// 272,042 + conv1 + bn1: C = 3 gives 432 + 32 -> 272,474 (torchvision's CIFAR ResNet-20),
// C = 1 (Fashion-MNIST) gives 144 + 32 -> 272,186.
//
// Gradient check: L = sum(y * r) as in test_layers_gradcheck.cpp, with its eps = 1e-2 and
// tolerance atol 1e-3 + rtol 1e-2, BatchNorm in training mode. A ResNet is only piecewise
// smooth, and in a tiny one a step of one early weight moves every later ReLU input: with
// BatchNorm's outputs centred on 0, about half the entries of conv1 and layer1 have a kink
// within eps, where a central difference measures the mean of the two sides' slopes. So
// (1) the BatchNorm biases are drawn from U(2, 3) (weights U(0.5, 1.5)), which puts most
// ReLU inputs well above 0 and kinks within eps on few entries, and (2) an entry whose
// central difference misses is checked against the one-sided second-order differences
// from either side at eps/2 and eps/20: one side of a kink is smooth, and the analytic
// gradient must be that side's slope. A wrong gradient misses all five (scaling the
// shortcut's gradient by 0.97 fails a dozen entries).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "zoo/resnet.h"
#include "zoo/zoo.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/global_avg_pool.h"
#include "runtime/model.h"

using namespace tandem;

namespace {

using Named = std::vector<std::pair<std::string, Shape>>;

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

Named parameter_list(const Model& m) {
  Named out;
  for (const Parameter* p : m.parameters()) out.emplace_back(p->name, p->value.shape());
  return out;
}

Named buffer_list(const Model& m) {
  Named out;
  for (const auto* b : m.buffers()) out.emplace_back(b->name, b->value.shape());
  return out;
}

// torchvision's named_parameters() and named_buffers() of the CIFAR ResNet, option B.
std::pair<Named, Named> torchvision_names(int64_t depth, int64_t width, int64_t in_channels, int64_t classes) {
  Named params, buffers;
  auto bn = [&](const std::string& name, int64_t c) {
    params.emplace_back(name + ".weight", Shape{c});
    params.emplace_back(name + ".bias", Shape{c});
    buffers.emplace_back(name + ".running_mean", Shape{c});
    buffers.emplace_back(name + ".running_var", Shape{c});
    buffers.emplace_back(name + ".num_batches_tracked", Shape{});
  };
  params.emplace_back("conv1.weight", Shape{width, in_channels, 3, 3});
  bn("bn1", width);
  const int64_t n = (depth - 2) / 6;
  int64_t in = width;
  for (int s = 0; s < 3; ++s) {
    const int64_t out = width << s;
    for (int64_t b = 0; b < n; ++b) {
      const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      const int64_t c = b == 0 ? in : out;
      params.emplace_back(p + ".conv1.weight", Shape{out, c, 3, 3});
      bn(p + ".bn1", out);
      params.emplace_back(p + ".conv2.weight", Shape{out, out, 3, 3});
      bn(p + ".bn2", out);
      if (b == 0 && s > 0) {
        params.emplace_back(p + ".downsample.0.weight", Shape{out, c, 1, 1});
        bn(p + ".downsample.1", out);
      }
    }
    in = out;
  }
  params.emplace_back("fc.weight", Shape{classes, 4 * width});
  params.emplace_back("fc.bias", Shape{classes});
  return {params, buffers};
}

ResNetConfig config(int64_t depth, int64_t width, bool checkpointing = false) {
  ResNetConfig c;
  c.depth = depth;
  c.width = width;
  c.activation_checkpointing = checkpointing;
  return c;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument)";
}

}  // namespace

TEST(ResNet, Depth8NamesAndShapesAreTorchvisions) {
  auto m = build_resnet(config(8, 16), 3, 32, 32, 10, 0);
  const Named params = {
      {"conv1.weight", {16, 3, 3, 3}},
      {"bn1.weight", {16}},
      {"bn1.bias", {16}},
      {"layer1.0.conv1.weight", {16, 16, 3, 3}},
      {"layer1.0.bn1.weight", {16}},
      {"layer1.0.bn1.bias", {16}},
      {"layer1.0.conv2.weight", {16, 16, 3, 3}},
      {"layer1.0.bn2.weight", {16}},
      {"layer1.0.bn2.bias", {16}},
      {"layer2.0.conv1.weight", {32, 16, 3, 3}},
      {"layer2.0.bn1.weight", {32}},
      {"layer2.0.bn1.bias", {32}},
      {"layer2.0.conv2.weight", {32, 32, 3, 3}},
      {"layer2.0.bn2.weight", {32}},
      {"layer2.0.bn2.bias", {32}},
      {"layer2.0.downsample.0.weight", {32, 16, 1, 1}},
      {"layer2.0.downsample.1.weight", {32}},
      {"layer2.0.downsample.1.bias", {32}},
      {"layer3.0.conv1.weight", {64, 32, 3, 3}},
      {"layer3.0.bn1.weight", {64}},
      {"layer3.0.bn1.bias", {64}},
      {"layer3.0.conv2.weight", {64, 64, 3, 3}},
      {"layer3.0.bn2.weight", {64}},
      {"layer3.0.bn2.bias", {64}},
      {"layer3.0.downsample.0.weight", {64, 32, 1, 1}},
      {"layer3.0.downsample.1.weight", {64}},
      {"layer3.0.downsample.1.bias", {64}},
      {"fc.weight", {10, 64}},
      {"fc.bias", {10}},
  };
  EXPECT_EQ(parameter_list(*m), params);
  Named buffers;
  for (const auto& [bn, c] : std::vector<std::pair<std::string, int64_t>>{
           {"bn1", 16},
           {"layer1.0.bn1", 16},
           {"layer1.0.bn2", 16},
           {"layer2.0.bn1", 32},
           {"layer2.0.bn2", 32},
           {"layer2.0.downsample.1", 32},
           {"layer3.0.bn1", 64},
           {"layer3.0.bn2", 64},
           {"layer3.0.downsample.1", 64}}) {
    buffers.emplace_back(bn + ".running_mean", Shape{c});
    buffers.emplace_back(bn + ".running_var", Shape{c});
    buffers.emplace_back(bn + ".num_batches_tracked", Shape{});
  }
  EXPECT_EQ(buffer_list(*m), buffers);
  EXPECT_EQ(torchvision_names(8, 16, 3, 10), std::make_pair(params, buffers));  // the generator below
  for (const auto* b : m->buffers())
    EXPECT_EQ(b->value.dtype(), b->name.ends_with("num_batches_tracked") ? DType::i64 : DType::f32) << b->name;
}

TEST(ResNet, Depth20NamesShapesAndParameterCount) {
  for (int64_t in : {1, 3}) {
    auto m = build_resnet(config(20, 16), in, 28, 28, 10, 0);
    const auto [params, buffers] = torchvision_names(20, 16, in, 10);
    EXPECT_EQ(parameter_list(*m), params);
    EXPECT_EQ(buffer_list(*m), buffers);
    EXPECT_EQ(m->parameters().size(), 1u + 2u + 9u * 6u + 2u * 3u + 2u);  // 65 tensors
    EXPECT_EQ(m->num_parameters(), in == 1 ? 272186 : 272474);
  }
  // Checkpointing wraps the stages transparently: the same names.
  auto c = build_resnet(config(20, 16, true), 1, 28, 28, 10, 0);
  EXPECT_EQ(parameter_list(*c), torchvision_names(20, 16, 1, 10).first);
  EXPECT_EQ(buffer_list(*c), torchvision_names(20, 16, 1, 10).second);
}

TEST(ResNet, TheZooBuildsItAndOutputsOneRowPerImage) {
  ModelConfig mc;
  mc.name = "resnet";
  mc.resnet = config(14, 4);
  auto m = build_model(mc, 3);  // 1 x 28 x 28, 10 classes
  const Tensor y = m->forward(random_tensor({3, 1, 28, 28}, 1));
  EXPECT_EQ(y.shape(), (Shape{3, 10}));
  auto odd = build_resnet(config(8, 2), 3, 9, 7, 5, 0);  // odd sizes: 9x7 -> 5x4 -> 3x2
  EXPECT_EQ(odd->forward(random_tensor({2, 3, 9, 7}, 2)).shape(), (Shape{2, 5}));
  odd->set_training(false);
  const Tensor e = odd->forward(random_tensor({1, 3, 9, 7}, 3));
  EXPECT_EQ(e.shape(), (Shape{1, 5}));
  for (float v : e.to_vector()) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(error_of([] {
              ModelConfig bad;
              bad.name = "resnet50";
              build_model(bad, 0);
            }).find("resnet"),
            std::string::npos);
}

TEST(ResNet, BadConfigsNameTheFlag) {
  for (int64_t depth : {0, 2, 7, 9, 19, 21, -4}) {
    const std::string e = error_of([&] { check_resnet_config(config(depth, 16)); });
    EXPECT_NE(e.find("--depth must be 6n + 2"), std::string::npos) << e;
    EXPECT_NE(e.find("got " + std::to_string(depth)), std::string::npos) << e;
  }
  for (int64_t depth : {8, 14, 20, 32, 56, 110}) EXPECT_NO_THROW(check_resnet_config(config(depth, 16)));
  EXPECT_NE(error_of([] { check_resnet_config(config(20, 0)); }).find("--width must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { build_resnet(config(20, 16), 1, 3, 28, 10, 0); }).find("at least 4x4"), std::string::npos);
  EXPECT_NE(error_of([] { build_resnet(config(20, 16), 0, 28, 28, 10, 0); }).find("channels"), std::string::npos);
  // The zoo says so too, through build_resnet.
  ModelConfig mc;
  mc.name = "resnet";
  mc.resnet = config(10, 16);
  EXPECT_NE(error_of([&] { build_model(mc, 0); }).find("--depth"), std::string::npos);
}

TEST(ResNet, InitIsTorchvisionsAndDeterministicPerSeed) {
  auto a = build_resnet(config(20, 16), 1, 28, 28, 10, 5);
  auto b = build_resnet(config(20, 16), 1, 28, 28, 10, 5);
  EXPECT_EQ(parameter_checksum(*a), parameter_checksum(*b));
  EXPECT_NE(parameter_checksum(*a), parameter_checksum(*build_resnet(config(20, 16), 1, 28, 28, 10, 6)));
  // The same seed and name give the same values whatever else the model holds.
  auto wide = build_resnet(config(8, 16), 1, 28, 28, 10, 5);
  EXPECT_EQ(wide->find("layer1.0.conv1.weight")->value.to_vector(), a->find("layer1.0.conv1.weight")->value.to_vector());
  // kaiming_normal_(fan_out): std sqrt(2 / (OC k k)); sample std within 3% over >= 2048 draws.
  for (const char* name : {"layer3.1.conv2.weight", "layer2.0.conv1.weight", "layer3.0.downsample.0.weight"}) {
    const Parameter* p = a->find(name);
    const double fan_out = static_cast<double>(p->value.dim(0) * p->value.dim(2) * p->value.dim(3));
    double s = 0, s2 = 0;
    const auto v = p->value.to_vector();
    for (float x : v) s += x, s2 += static_cast<double>(x) * x;
    const double mean = s / v.size(), sd = std::sqrt(s2 / v.size() - mean * mean);
    EXPECT_NEAR(sd, std::sqrt(2 / fan_out), 0.03 * std::sqrt(2 / fan_out)) << name;
    EXPECT_NEAR(mean, 0, 4 * std::sqrt(2 / fan_out / v.size())) << name;
  }
  // Every 1-D parameter but fc.bias is a BatchNorm's: weight 1, bias 0.
  for (const Parameter* p : a->parameters()) {
    if (p->value.ndim() != 1 || p->name == "fc.bias") continue;
    const float want = p->name.ends_with(".weight") ? 1.f : 0.f;
    for (float x : p->value.to_vector()) EXPECT_EQ(x, want) << p->name;
  }
  for (float x : a->find("fc.weight")->value.to_vector()) EXPECT_LE(std::fabs(x), 1 / std::sqrt(64.f));
  for (const auto* buf : a->buffers()) {
    if (buf->value.dtype() != DType::f32) continue;  // num_batches_tracked
    const float want = buf->name.ends_with("running_var") ? 1.f : 0.f;
    for (float x : buf->value.to_vector()) EXPECT_EQ(x, want) << buf->name;
  }
}

TEST(ResNet, FiniteDifferenceGradientsOfATinyResNet) {
  constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 1e-2;
  auto m = build_resnet(config(8, 2), 2, 8, 8, 3, 11);  // 8x8 -> 4x4 -> 2x2
  m->layer(0).set_needs_input_grad(true);  // the input's gradient is checked too
  // BatchNorm weights ~ U(0.5, 1.5) and biases ~ U(2, 3): most ReLU inputs sit well above 0,
  // so kinks within eps are rare.
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> bn_weight(0.5f, 1.5f), bn_bias(2.f, 3.f);
  for (Parameter* p : m->parameters()) {
    if (p->value.ndim() != 1 || p->name.starts_with("fc.")) continue;
    for (int64_t j = 0; j < p->value.numel(); ++j)
      p->value.f32()[j] = p->name.ends_with(".weight") ? bn_weight(rng) : bn_bias(rng);
  }
  Tensor x = random_tensor({4, 2, 8, 8}, 12);
  const Tensor y0 = m->forward(x);
  const Tensor r = random_tensor(y0.shape(), 13);
  const std::vector<float> rv = r.to_vector();
  m->zero_grad();
  const Tensor dx = m->backward(r);
  ASSERT_TRUE(dx.defined());
  ASSERT_EQ(dx.shape(), x.shape());
  auto loss = [&] {
    const std::vector<float> y = m->forward(x).to_vector();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * rv[i];
    return s;
  };
  const double l0 = loss();
  // L at data[i] moved by about `delta`, and the move as stored (eps's own rounding is exact).
  auto moved = [&](float* data, size_t i, double delta) {
    const float saved = data[i];
    data[i] = static_cast<float>(saved + delta);
    const double step = static_cast<double>(data[i]) - saved, l = loss();
    data[i] = saved;
    return std::make_pair(step, l);
  };
  // The derivative from one side, second order: the parabola through (0, l0), (a, la), (b, lb).
  auto one_sided = [&](float* data, size_t i, double h) {
    const auto [a, la] = moved(data, i, h);
    const auto [b, lb] = moved(data, i, 2 * h);
    return -(a + b) / (a * b) * l0 + b / (a * (b - a)) * la - a / (b * (b - a)) * lb;
  };
  int central_ok = 0, one_sided_ok = 0;
  auto check = [&](float* data, const std::vector<float>& analytic, const std::string& what, int want) {
    const size_t n = analytic.size(), count = std::min<size_t>(n, static_cast<size_t>(want));
    for (size_t t = 0; t < count; ++t) {
      const size_t i = t * n / count;  // spread over the tensor
      const double a = analytic[i], tol = kAtol + kRtol * std::fabs(a);
      const auto [up, lp] = moved(data, i, kEps);
      const auto [down, lm] = moved(data, i, -kEps);
      const double central = (lp - lm) / (up - down);
      if (std::fabs(central - a) <= tol) {
        ++central_ok;
        continue;
      }
      // A ReLU kink within eps: one side of it, at the coarse or the fine scale, is smooth.
      const double sides[] = {one_sided(data, i, kEps / 2), one_sided(data, i, -kEps / 2),
                              one_sided(data, i, kEps / 20), one_sided(data, i, -kEps / 20)};
      bool ok = false;
      for (double d : sides) ok = ok || std::fabs(d - a) <= tol;
      one_sided_ok += ok;
      EXPECT_TRUE(ok) << what << "[" << i << "]: analytic " << a << ", central " << central
                      << ", right/left at eps/2 " << sides[0] << " " << sides[1] << ", at eps/20 " << sides[2]
                      << " " << sides[3] << " (tolerance " << tol << ")";
    }
  };
  std::map<std::string, std::vector<float>> grads;
  for (Parameter* p : m->parameters()) grads[p->name] = p->grad.to_vector();
  check(x.f32(), dx.to_vector(), "input", 8);
  for (Parameter* p : m->parameters()) check(p->value.f32(), grads[p->name], p->name, 3);
  std::printf("[ResNet gradcheck] %d entries within tolerance of the central difference, %d of a one-sided one\n",
              central_ok, one_sided_ok);
}

TEST(ResNet, EveryParameterIsReportedReadyOnceInReverseOrder) {
  for (bool checkpointing : {false, true}) {
    auto m = build_resnet(config(14, 2, checkpointing), 1, 8, 8, 3, 1);
    std::vector<std::string> fired;
    m->set_grad_ready_hook([&](Parameter& p) { fired.push_back(p.name); });
    m->zero_grad();
    m->forward(random_tensor({2, 1, 8, 8}, 3));
    m->backward(random_tensor({2, 3}, 2));
    std::vector<std::string> reversed;
    for (const Parameter* p : m->parameters()) reversed.insert(reversed.begin(), p->name);
    // Exactly the reverse of registration: a block registers its shortcut last and runs
    // its backward first, and every sub-module reports as soon as it is done.
    EXPECT_EQ(fired, reversed);
    ASSERT_FALSE(fired.empty());
    EXPECT_EQ(fired.front(), "fc.bias");
    EXPECT_EQ(fired.back(), "conv1.weight");
  }
}

// Checkpointing recomputes each stage in backward: the same sums in the same order, so
// every output, gradient and buffer is bit for bit what the plain model gives, over two steps.
TEST(ResNet, ActivationCheckpointingChangesNoBit) {
  auto plain = build_resnet(config(14, 4), 1, 12, 12, 5, 7);
  auto ckpt = build_resnet(config(14, 4, true), 1, 12, 12, 5, 7);
  ASSERT_EQ(parameter_checksum(*plain), parameter_checksum(*ckpt));
  EXPECT_EQ(ckpt->layer(3).kind(), "ActivationCheckpoint(ResNetStage)");
  for (int step = 0; step < 2; ++step) {
    const Tensor x = random_tensor({3, 1, 12, 12}, 20 + step), dy = random_tensor({3, 5}, 30 + step);
    plain->zero_grad();
    ckpt->zero_grad();
    EXPECT_EQ(plain->forward(x).to_vector(), ckpt->forward(x).to_vector());
    plain->backward(dy);
    ckpt->backward(dy);
    for (size_t i = 0; i < plain->parameters().size(); ++i)
      EXPECT_EQ(plain->parameters()[i]->grad.to_vector(), ckpt->parameters()[i]->grad.to_vector())
          << plain->parameters()[i]->name << " at step " << step;
    EXPECT_EQ(buffer_checksum(*plain), buffer_checksum(*ckpt)) << "step " << step;
  }
}

TEST(GlobalAvgPool, ForwardIsThePlaneMeanAndBackwardSpreadsIt) {
  GlobalAvgPool pool;
  const Tensor x = random_tensor({2, 3, 4, 5}, 40);
  const Tensor y = pool.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const auto xv = x.to_vector(), yv = y.to_vector();
  for (int p = 0; p < 6; ++p) {
    double s = 0;
    for (int j = 0; j < 20; ++j) s += xv[p * 20 + j];
    EXPECT_NEAR(yv[p], s / 20, 1e-6) << "plane " << p;
  }
  const Tensor dy = random_tensor({2, 3}, 41);
  const Tensor dx = pool.backward(dy);
  ASSERT_EQ(dx.shape(), x.shape());
  const auto dyv = dy.to_vector(), dxv = dx.to_vector();
  for (int p = 0; p < 6; ++p)
    for (int j = 0; j < 20; ++j) EXPECT_FLOAT_EQ(dxv[p * 20 + j], dyv[p] / 20.f);
  // Linear in x: the finite difference of sum(y * dy) is exact up to rounding.
  Tensor xp = x.clone();
  for (int i : {0, 7, 59, 119}) {
    const float saved = xp.f32()[i];
    auto l = [&] {
      const auto v = pool.forward(xp).to_vector();
      double s = 0;
      for (int k = 0; k < 6; ++k) s += static_cast<double>(v[k]) * dyv[k];
      return s;
    };
    xp.f32()[i] = saved + 0.5f;
    const double lp = l();
    xp.f32()[i] = saved - 0.5f;
    const double lm = l();
    xp.f32()[i] = saved;
    EXPECT_NEAR((lp - lm) / 1.0, dxv[i], 1e-5) << i;
  }
  EXPECT_THROW(pool.forward(random_tensor({2, 3}, 42)), std::invalid_argument);
  pool.forward(x);
  EXPECT_THROW(pool.backward(random_tensor({3, 2}, 43)), std::invalid_argument);
  pool.forward(x);
  pool.release_activations();
  EXPECT_THROW(pool.backward(dy), std::logic_error);  // nothing saved any more
  pool.set_training(false);
  pool.forward(x);
  EXPECT_THROW(pool.backward(dy), std::logic_error);  // evaluation keeps nothing
}

TEST(ResNetConv, ConvWithoutBiasHasOnlyAWeight) {
  Conv2d with(2, 3, 3, 1, 1), without(2, 3, 3, 1, 1, /*bias=*/false);
  EXPECT_EQ(with.parameters().size(), 2u);
  ASSERT_EQ(without.parameters().size(), 1u);
  with.set_prefix("c");
  without.set_prefix("c");
  with.reset_parameters(1);
  without.reset_parameters(1);
  EXPECT_EQ(without.parameters()[0]->name, "c.weight");
  // Same weight (same seed and name); zero the bias and the outputs agree bit for bit.
  std::fill(with.parameters()[1]->value.f32(), with.parameters()[1]->value.f32() + 3, 0.f);
  const Tensor x = random_tensor({2, 2, 5, 4}, 50);
  EXPECT_EQ(with.forward(x).to_vector(), without.forward(x).to_vector());
  const Tensor dy = random_tensor({2, 3, 5, 4}, 51);
  EXPECT_EQ(with.backward(dy).to_vector(), without.backward(dy).to_vector());
  EXPECT_EQ(with.parameters()[0]->grad.to_vector(), without.parameters()[0]->grad.to_vector());
}

