// Activation checkpointing (runtime/layers/activation_checkpoint.h) against the same model
// without it: a GPT with dropout trained a few AdamW steps with gradient accumulation
// (gradients, parameters and counters bit-identical, names unchanged, each parameter
// reported ready once and in the same order, Model's forward pre-hook not run by the
// recompute), a CNN chain (Conv2d, ReLU, MaxPool2d) with its input gradient, buffers a
// recompute must not update twice (a BatchNorm stand-in), evaluation as a pass-through,
// and every layer's release_activations (references dropped, backward then refused).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zoo/gpt.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/activation_checkpoint.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/layers/tied_linear.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"

using namespace tandem;

namespace {

// Deterministic test values in [-1, 1).
Tensor values(const Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(s >> 40) / 8388608.0f - 1.0f;
  }
  return Tensor::from_vector(v, shape);
}

Tensor ids(const Shape& shape, int32_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  uint64_t s = 977 * (seed + 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.data<int32_t>()[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A container of named sub-modules run in order (forward) and in reverse (backward).
class Chain final : public Module {
 public:
  std::string kind() const override { return "Chain"; }
  template <typename M>
  M& add(const std::string& name, std::unique_ptr<M> m) {
    M& ref = add_module(name, std::move(m));
    order_.push_back(&ref);
    return ref;
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (Module* m : order_) h = m->forward(h);
    return h;
  }
  Tensor backward(const Tensor& dy) override {
    Tensor g = dy;
    for (size_t i = order_.size(); i-- > 0;) {
      order_[i]->set_needs_input_grad(i > 0 || needs_input_grad_);
      g = backward_child(*order_[i], g);
    }
    return g;
  }

 private:
  std::vector<Module*> order_;
};

// BatchNorm's bookkeeping without its arithmetic: y = x * scale per feature; a training
// forward moves `running` (f32, the features' batch means) and counts itself in
// `tracked` (i64), so a recompute that kept its update would show.
class RunningMeanScale final : public Module {
 public:
  explicit RunningMeanScale(int64_t features) : features_(features) {
    scale_ = &add_parameter("scale", {features});
    running_ = &add_buffer("running", {features});
    tracked_ = &add_buffer("tracked", {1}, DType::i64);
  }
  std::string kind() const override { return "RunningMeanScale"; }
  void reset_parameters(uint64_t seed) override { init_uniform_values(seed); }
  Tensor forward(const Tensor& x) override {
    const int64_t rows = x.numel() / features_;
    Tensor y = Tensor::empty(x.shape());
    const float* s = scale_->value.f32();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t f = 0; f < features_; ++f) y.f32()[r * features_ + f] = x.f32()[r * features_ + f] * s[f];
    if (training()) {
      for (int64_t f = 0; f < features_; ++f) {
        float mean = 0;
        for (int64_t r = 0; r < rows; ++r) mean += x.f32()[r * features_ + f];
        running_->value.f32()[f] = 0.9f * running_->value.f32()[f] + 0.1f * mean / static_cast<float>(rows);
      }
      ++tracked_->value.data<int64_t>()[0];
      x_ = x;
    }
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    if (!x_.defined()) throw std::logic_error("RunningMeanScale: backward called without a preceding forward");
    const int64_t rows = x_.numel() / features_;
    Tensor dx = Tensor::empty(x_.shape());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t f = 0; f < features_; ++f) {
        const int64_t i = r * features_ + f;
        scale_->grad.f32()[f] += dy.f32()[i] * x_.f32()[i];
        dx.f32()[i] = dy.f32()[i] * scale_->value.f32()[f];
      }
    x_ = Tensor();
    return dx;
  }
  void release_activations() override { x_ = Tensor(); }

 private:
  void init_uniform_values(uint64_t seed) { scale_->value.copy_from(values({features_}, seed + 17)); }

  int64_t features_;
  Parameter* scale_;
  ModuleBuffer* running_;
  ModuleBuffer* tracked_;
  Tensor x_;
};

GptConfig small_gpt(bool checkpointing) {
  GptConfig c{13, 3, 2, 16, 8, 0.2f};
  c.activation_checkpointing = checkpointing;
  return c;
}

std::vector<std::string> names_of(const Model& m) {
  std::vector<std::string> out;
  for (const Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

void expect_same_gradients(const Model& a, const Model& b, const std::string& when) {
  ASSERT_EQ(a.parameters().size(), b.parameters().size());
  for (size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_TRUE(same_bits(a.parameters()[i]->grad, b.parameters()[i]->grad))
        << a.parameters()[i]->name << " " << when;
}

}  // namespace

TEST(ActivationCheckpoint, GptTrainsBitIdenticallyWithTheSameNamesCountersAndReadyOrder) {
  GptModel plain(small_gpt(false), 21), ckpt(small_gpt(true), 21);
  ASSERT_EQ(names_of(plain), names_of(ckpt));
  ASSERT_EQ(plain.layer_count(), ckpt.layer_count());
  for (size_t i = 0; i < ckpt.layer_count(); ++i) {
    EXPECT_EQ(plain.layer_name(i), ckpt.layer_name(i));
    const bool block = ckpt.layer_name(i).rfind("blocks.", 0) == 0;
    EXPECT_EQ(ckpt.layer(i).kind(), block ? "ActivationCheckpoint(TransformerBlock)" : plain.layer(i).kind());
  }
  EXPECT_EQ(parameter_checksum(plain), parameter_checksum(ckpt));
  ASSERT_EQ(plain.counters(), ckpt.counters());
  ASSERT_TRUE(ckpt.counters().count("blocks.1.attn.drop.calls"));

  std::vector<std::string> plain_order, ckpt_order;
  plain.set_grad_ready_hook([&](Parameter& p) { plain_order.push_back(p.name); });
  ckpt.set_grad_ready_hook([&](Parameter& p) { ckpt_order.push_back(p.name); });
  size_t plain_pre = 0, ckpt_pre = 0;  // Model's forward pre-hook (ZeRO's gather waits)
  plain.set_forward_pre_hook([&](Module&) { ++plain_pre; });
  ckpt.set_forward_pre_hook([&](Module&) { ++ckpt_pre; });

  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.weight_decay = 0.1f;
  oc.clip_grad_norm = 1.f;
  auto plain_opt = make_optimizer(oc, plain.parameters());
  auto ckpt_opt = make_optimizer(oc, ckpt.parameters());
  SoftmaxCrossEntropy plain_loss, ckpt_loss;
  const int64_t rows = 3, t = 8, micro = 2;
  for (int step = 0; step < 3; ++step) {
    plain.zero_grad();
    ckpt.zero_grad();
    for (int m = 0; m < micro; ++m) {  // gradient accumulation: two forwards and backwards per step
      const Tensor x = ids({rows, t}, 13, 10 * step + m), labels = ids({rows * t}, 13, 100 + 10 * step + m);
      const Tensor plain_logits = plain.forward(x);
      const Tensor ckpt_logits = ckpt.forward(x);
      ASSERT_TRUE(same_bits(plain_logits, ckpt_logits)) << "step " << step;
      EXPECT_EQ(plain_loss.forward(plain_logits, labels), ckpt_loss.forward(ckpt_logits, labels));
      plain_order.clear();
      ckpt_order.clear();
      plain.backward(plain_loss.dlogits(1.f / static_cast<float>(rows * t * micro)));
      ckpt.backward(ckpt_loss.dlogits(1.f / static_cast<float>(rows * t * micro)));
      EXPECT_EQ(plain_order, ckpt_order) << "step " << step;
      EXPECT_EQ(ckpt_order.size(), ckpt.parameters().size());
      EXPECT_EQ(std::set<std::string>(ckpt_order.begin(), ckpt_order.end()).size(), ckpt_order.size());
      EXPECT_EQ(plain.counters(), ckpt.counters()) << "step " << step;
    }
    expect_same_gradients(plain, ckpt, "at step " + std::to_string(step));
    plain_opt->step(1e-2f);
    ckpt_opt->step(1e-2f);
    EXPECT_EQ(parameter_checksum(plain), parameter_checksum(ckpt)) << "after step " << step;
  }
  EXPECT_EQ(ckpt_pre, plain_pre);  // once per layer per forward: never in a recompute
  EXPECT_EQ(ckpt_pre, plain.layer_count() * static_cast<size_t>(3 * micro));
  EXPECT_EQ(plain.counters().at("blocks.2.mlp.drop.calls"), static_cast<uint64_t>(3 * micro));
  EXPECT_EQ(plain.counters(), ckpt.counters());
}

TEST(ActivationCheckpoint, EvaluationIsAPassThrough) {
  GptModel plain(small_gpt(false), 4), ckpt(small_gpt(true), 4);
  plain.set_training(false);
  ckpt.set_training(false);
  const Tensor x = ids({2, 8}, 13, 1);
  EXPECT_TRUE(same_bits(plain.forward(x), ckpt.forward(x)));
  EXPECT_EQ(ckpt.counters(), plain.counters());
  EXPECT_EQ(ckpt.counters().at("blocks.0.attn.drop.calls"), 0u);  // evaluation draws no mask
  // Nothing was kept for a backward: the wrapped block refuses, as it would unwrapped.
  ActivationCheckpoint wrapped(std::make_unique<Linear>(4, 3));
  wrapped.set_training(false);
  const Tensor in = values({2, 4}, 3);
  wrapped.forward(in);
  EXPECT_EQ(in.storage().use_count(), 1);
  EXPECT_THROW(wrapped.backward(values({2, 3}, 4)), std::logic_error);
}

TEST(ActivationCheckpoint, CnnChainGivesBitIdenticalGradientsAndInputGradient) {
  auto chain = [] {
    auto c = std::make_unique<Chain>();
    c->add("conv", std::make_unique<Conv2d>(2, 3, 3, 1, 1));
    c->add("relu", std::make_unique<ReLU>());
    c->add("pool", std::make_unique<MaxPool2d>(2));
    return c;
  };
  std::unique_ptr<Module> plain = chain();
  ActivationCheckpoint ckpt(chain());
  plain->set_prefix("features");
  ckpt.set_prefix("features");
  plain->reset_parameters(8);
  ckpt.reset_parameters(8);
  std::vector<std::string> plain_names, ckpt_names;
  for (const Parameter* p : plain->parameters()) plain_names.push_back(p->name);
  for (const Parameter* p : ckpt.parameters()) ckpt_names.push_back(p->name);
  EXPECT_EQ(plain_names, ckpt_names);
  EXPECT_EQ(ckpt_names.front(), "features.conv.weight");
  EXPECT_TRUE(ckpt.own_parameters().empty());
  EXPECT_EQ(ckpt.kind(), "ActivationCheckpoint(Chain)");
  for (int step = 0; step < 2; ++step) {
    const Tensor x = values({3, 2, 6, 6}, step), dy = values({3, 3, 3, 3}, 50 + step);
    const Tensor y_plain = plain->forward(x), y_ckpt = ckpt.forward(x);
    ASSERT_TRUE(same_bits(y_plain, y_ckpt));
    EXPECT_EQ(y_ckpt.storage().use_count(), 1);  // the chain's caches were released
    const Tensor dx_plain = plain->backward(dy), dx_ckpt = ckpt.backward(dy);
    EXPECT_TRUE(same_bits(dx_plain, dx_ckpt)) << "step " << step;
    for (size_t i = 0; i < plain->parameters().size(); ++i)
      EXPECT_TRUE(same_bits(plain->parameters()[i]->grad, ckpt.parameters()[i]->grad))
          << plain->parameters()[i]->name << " at step " << step;
  }
  // needs_input_grad reaches the wrapped module for its backward, and is its own again after.
  ckpt.set_needs_input_grad(false);
  ckpt.forward(values({1, 2, 6, 6}, 9));
  EXPECT_FALSE(ckpt.backward(values({1, 3, 3, 3}, 10)).defined());
  EXPECT_TRUE(ckpt.inner().needs_input_grad());
}

TEST(ActivationCheckpoint, RecomputeLeavesBuffersAsOneForwardLeftThem) {
  auto block = [] {
    auto c = std::make_unique<Chain>();
    c->add("fc", std::make_unique<Linear>(4, 3));
    c->add("bn", std::make_unique<RunningMeanScale>(3));
    return c;
  };
  Model plain, ckpt;
  plain.add("block", block());
  ckpt.add("block", std::make_unique<ActivationCheckpoint>(block()));
  plain.reset_parameters(2);
  ckpt.reset_parameters(2);
  ASSERT_EQ(ckpt.buffers().size(), 2u);
  EXPECT_EQ(ckpt.buffers()[0]->name, "block.bn.running");
  EXPECT_EQ(ckpt.buffers()[1]->name, "block.bn.tracked");
  std::vector<std::string> plain_order, ckpt_order;
  plain.set_grad_ready_hook([&](Parameter& p) { plain_order.push_back(p.name); });
  ckpt.set_grad_ready_hook([&](Parameter& p) { ckpt_order.push_back(p.name); });
  for (int step = 0; step < 3; ++step) {
    plain.zero_grad();
    ckpt.zero_grad();
    const Tensor x = values({5, 4}, step), dy = values({5, 3}, 20 + step);
    EXPECT_TRUE(same_bits(plain.forward(x), ckpt.forward(x)));
    EXPECT_EQ(buffer_checksum(plain), buffer_checksum(ckpt));  // after one forward each
    plain.backward(dy);
    ckpt.backward(dy);
    EXPECT_EQ(buffer_checksum(plain), buffer_checksum(ckpt)) << "step " << step;
    for (size_t i = 0; i < plain.buffers().size(); ++i)
      EXPECT_TRUE(same_bits(plain.buffers()[i]->value, ckpt.buffers()[i]->value)) << plain.buffers()[i]->name;
    EXPECT_EQ(ckpt.find_buffer("block.bn.tracked")->value.data<int64_t>()[0], step + 1);
    expect_same_gradients(plain, ckpt, "at step " + std::to_string(step));
  }
  EXPECT_EQ(plain_order, ckpt_order);
  EXPECT_EQ(ckpt_order, (std::vector<std::string>{"block.bn.scale", "block.fc.bias", "block.fc.weight", "block.bn.scale",
                                                  "block.fc.bias", "block.fc.weight", "block.bn.scale", "block.fc.bias",
                                                  "block.fc.weight"}));
}

TEST(ActivationCheckpoint, KeepsOnlyItsInputAndRefusesABackwardWithoutAForward) {
  ActivationCheckpoint fresh(std::make_unique<Linear>(4, 3));
  try {
    fresh.backward(values({2, 3}, 1));
    FAIL() << "expected a throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("ActivationCheckpoint(Linear): backward called without a preceding forward"),
              std::string::npos)
        << e.what();
  }
  // A TransformerBlock's output is held by its last layer's cache unwrapped, by the caller only wrapped.
  TransformerBlock plain(8, 2);
  ActivationCheckpoint wrapped(std::make_unique<TransformerBlock>(8, 2));
  const Tensor x = values({2, 3, 8}, 2);
  const Tensor y_plain = plain.forward(x), y = wrapped.forward(x);
  EXPECT_GT(y_plain.storage().use_count(), 1);
  EXPECT_EQ(y.storage().use_count(), 1);
  EXPECT_EQ(x.storage().use_count(), 3);  // x, plain's ln1, the wrapper
  wrapped.release_activations();
  EXPECT_EQ(x.storage().use_count(), 2);
  EXPECT_THROW(wrapped.backward(values({2, 3, 8}, 3)), std::logic_error);
  // After a backward the wrapper holds nothing: a second backward is refused.
  wrapped.forward(x);
  wrapped.backward(values({2, 3, 8}, 4));
  EXPECT_EQ(x.storage().use_count(), 2);
  EXPECT_THROW(wrapped.backward(values({2, 3, 8}, 4)), std::logic_error);
}

// Every layer that keeps tensors drops them (the input's or output's reference count falls
// back) and then refuses a backward with its "no forward" error.
TEST(ActivationCheckpoint, EveryLayerReleasesWhatItSaved) {
  struct Case {
    std::string name;
    std::unique_ptr<Module> layer;
    Tensor x;
    Shape dy_shape;
    bool holds_input;  // forward keeps x itself (else: only its own buffers)
  };
  Parameter tied{"wte.weight", values({7, 4}, 5), Tensor::zeros({7, 4})};
  auto conv_keeping_input = std::make_unique<Conv2d>(2, 3, 3);
  conv_keeping_input->set_saved_columns_limit(0);  // keeps x, rebuilds the columns in backward
  std::vector<Case> cases;
  cases.push_back({"Linear", std::make_unique<Linear>(4, 3), values({2, 4}, 1), {2, 3}, true});
  cases.push_back({"ReLU", std::make_unique<ReLU>(), values({2, 4}, 1), {2, 4}, false});
  cases.push_back({"GELU", std::make_unique<GELU>(), values({2, 4}, 1), {2, 4}, true});
  cases.push_back({"LayerNorm", std::make_unique<LayerNorm>(4), values({2, 4}, 1), {2, 4}, true});
  cases.push_back({"Dropout", std::make_unique<Dropout>(0.5f, 3), values({2, 4}, 1), {2, 4}, false});
  cases.push_back({"Embedding", std::make_unique<Embedding>(7, 4), ids({2, 3}, 7, 1), {2, 3, 4}, true});
  cases.push_back({"PositionEmbedding", std::make_unique<PositionEmbedding>(5, 4), values({2, 3, 4}, 1), {2, 3, 4},
                   false});
  cases.push_back({"Flatten", std::make_unique<Flatten>(), values({2, 2, 2}, 1), {2, 4}, false});
  cases.push_back({"MaxPool2d", std::make_unique<MaxPool2d>(2), values({1, 2, 4, 4}, 1), {1, 2, 2, 2}, false});
  cases.push_back({"Conv2d", std::make_unique<Conv2d>(2, 3, 3), values({1, 2, 4, 4}, 1), {1, 3, 2, 2}, false});
  cases.push_back({"Conv2d", std::move(conv_keeping_input), values({1, 2, 4, 4}, 1), {1, 3, 2, 2}, true});
  cases.push_back({"TiedLinear", std::make_unique<TiedLinear>(tied), values({2, 4}, 1), {2, 7}, true});
  cases.push_back({"CausalSelfAttention", std::make_unique<CausalSelfAttention>(8, 2, 0.1f, 3),
                   values({2, 3, 8}, 1), {2, 3, 8}, true});
  cases.push_back({"CausalSelfAttention (tiled)",
                   std::make_unique<CausalSelfAttention>(8, 2, 0.1f, 3, AttentionKernel::tiled),
                   values({2, 3, 8}, 1), {2, 3, 8}, true});
  cases.push_back({"Mlp", std::make_unique<Mlp>(8, 0.1f, 3), values({2, 3, 8}, 1), {2, 3, 8}, true});
  cases.push_back({"TransformerBlock", std::make_unique<TransformerBlock>(8, 2, 0.1f, 3), values({2, 3, 8}, 1),
                   {2, 3, 8}, true});
  cases.push_back({"ActivationCheckpoint", std::make_unique<ActivationCheckpoint>(std::make_unique<Linear>(4, 3)),
                   values({2, 4}, 1), {2, 3}, true});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.layer->reset_parameters(1);
    const Tensor dy = values(c.dy_shape, 9);
    // Forward and backward once first, so the layer's reusable buffers exist.
    c.layer->forward(c.x);
    c.layer->backward(dy);
    const long before = c.x.storage().use_count();
    Tensor y = c.layer->forward(c.x);
    if (c.holds_input) {
      EXPECT_GT(c.x.storage().use_count(), before);
    }
    const bool y_is_x = y.shares_storage_with(c.x);  // Flatten's view
    c.layer->release_activations();
    EXPECT_EQ(c.x.storage().use_count(), before + (y_is_x ? 1 : 0));
    if (!y_is_x) {
      EXPECT_EQ(y.storage().use_count(), 1) << "the layer still holds its output";
    }
    try {
      c.layer->backward(dy);
      ADD_FAILURE() << c.name << ": backward after release_activations did not throw";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("backward called without a preceding forward"), std::string::npos)
          << e.what();
    }
    // And it works again after a fresh forward.
    c.layer->forward(c.x);
    EXPECT_NO_THROW(c.layer->backward(dy));
  }
}
