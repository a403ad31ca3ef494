// Optimizers over element ranges (ZeRO-1's shards, runtime/optim/optimizer.h): pieces
// that cut across parameters at odd offsets, updated by several range optimizers, give
// bit for bit what one plain optimizer gives, AdamW's decay included; the state covers
// the ranges only; clipping sums the ranges' norms through the reduction hook.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/layers/linear.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"

using namespace tandem;

namespace {

std::unique_ptr<Model> net() {
  auto m = std::make_unique<Model>();
  m->add("fc1", std::make_unique<Linear>(5, 7));  // weight 35 (decayed by AdamW), bias 7 (not)
  m->add("fc2", std::make_unique<Linear>(7, 3));  // 21, 3
  m->reset_parameters(9);
  return m;
}

void set_grads(Model& m, int step) {
  for (size_t i = 0; i < m.parameters().size(); ++i) {
    Parameter* p = m.parameters()[i];
    std::vector<float> g(static_cast<size_t>(p->grad.numel()));
    for (size_t j = 0; j < g.size(); ++j) g[j] = 0.01f * static_cast<float>((j * 7 + i * 3 + step) % 11) - 0.05f;
    p->grad.copy_from(Tensor::from_vector(g, p->grad.shape()));
  }
}

// Every element of `m`'s parameters in registration order, cut into `parts` contiguous
// runs of the flat sequence (as shards cut a bucket): part k's (parameter, range) pieces.
std::vector<std::vector<ParamRange>> cut(const Model& m, int parts) {
  int64_t total = 0;
  for (const Parameter* p : m.parameters()) total += p->value.numel();
  const int64_t each = (total + parts - 1) / parts;
  std::vector<std::vector<ParamRange>> out(parts);
  int64_t at = 0;
  for (size_t i = 0; i < m.parameters().size(); ++i) {
    const int64_t n = m.parameters()[i]->value.numel();
    for (int k = 0; k < parts; ++k) {
      const int64_t from = std::max(at, k * each), to = std::min(at + n, (k + 1) * each);
      if (to > from) out[k].push_back({i, from - at, to - from});
    }
    at += n;
  }
  return out;
}

bool same_bits(const Model& a, const Model& b) {
  for (size_t i = 0; i < a.parameters().size(); ++i)
    if (std::memcmp(a.parameters()[i]->value.raw(), b.parameters()[i]->value.raw(),
                    a.parameters()[i]->value.nbytes()) != 0)
      return false;
  return true;
}

}  // namespace

TEST(OptimizerRanges, ThreeShardsEqualOnePlainOptimizerBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    OptimizerConfig oc;
    oc.kind = kind;
    oc.weight_decay = 0.1f;
    auto plain_model = net(), sharded_model = net();
    auto plain = make_optimizer(oc, plain_model->parameters());
    std::vector<std::unique_ptr<Optimizer>> shards;
    for (auto& ranges : cut(*sharded_model, 3))
      shards.push_back(make_sharded_optimizer(oc, sharded_model->parameters(), ranges));
    int64_t state = 0;
    for (auto& s : shards) state += s->state_bytes();
    EXPECT_EQ(state, plain->state_bytes()) << "the shards' state adds up to the plain state";
    EXPECT_TRUE(shards[0]->sharded());
    EXPECT_THROW(shards[0]->state(), std::logic_error);
    for (int step = 0; step < 5; ++step) {
      set_grads(*plain_model, step);
      set_grads(*sharded_model, step);
      plain->step(0.01f);
      for (auto& s : shards) s->step(0.01f);
    }
    EXPECT_TRUE(same_bits(*plain_model, *sharded_model)) << (kind == OptimizerKind::sgd ? "sgd" : "adamw");
    // Each shard's state is the plain state of its ranges.
    for (auto& s : shards)
      for (size_t r = 0; r < s->ranges().size(); ++r) {
        const ParamRange& range = s->ranges()[r];
        auto mine = s->slot(r, 0).to_vector(), whole = plain->slot(range.param, 0).to_vector();
        ASSERT_EQ(mine.size(), static_cast<size_t>(range.count));
        for (int64_t j = 0; j < range.count; ++j) ASSERT_EQ(mine[j], whole[range.first + j]);
      }
  }
}

TEST(OptimizerRanges, ClippingSumsEveryShardsNormThroughTheReduction) {
  OptimizerConfig oc;
  oc.momentum = 0.f;
  oc.clip_grad_norm = 0.01f;  // far below the gradients' norm: every step clips
  auto plain_model = net(), sharded_model = net();
  auto plain = make_optimizer(oc, plain_model->parameters());
  auto parts = cut(*sharded_model, 2);
  auto a = make_sharded_optimizer(oc, sharded_model->parameters(), parts[0]);
  auto b = make_sharded_optimizer(oc, sharded_model->parameters(), parts[1]);
  // One process stands in for two ranks: each shard's gather fills in the other's part
  // of the squared norm, computed from the gradients both see.
  auto norm_sq_of = [&](const std::vector<ParamRange>& ranges) {
    double s = 0;
    for (const ParamRange& r : ranges) {
      auto g = sharded_model->parameters()[r.param]->grad.to_vector();
      for (int64_t j = 0; j < r.count; ++j) s += static_cast<double>(g[r.first + j]) * g[r.first + j];
    }
    return s;
  };
  double other_a = 0, other_b = 0;
  a->set_norm_reduction(2, 0, [&](Tensor& t) { static_cast<double*>(t.raw())[1] = other_a; });
  b->set_norm_reduction(2, 1, [&](Tensor& t) { static_cast<double*>(t.raw())[0] = other_b; });
  set_grads(*plain_model, 0);
  set_grads(*sharded_model, 0);
  other_a = norm_sq_of(parts[1]);
  other_b = norm_sq_of(parts[0]);
  plain->step(0.5f);
  a->step(0.5f);
  b->step(0.5f);
  double worst = 0;
  for (size_t i = 0; i < plain_model->parameters().size(); ++i) {
    auto x = plain_model->parameters()[i]->value.to_vector(), y = sharded_model->parameters()[i]->value.to_vector();
    for (size_t j = 0; j < x.size(); ++j) worst = std::max(worst, static_cast<double>(std::fabs(x[j] - y[j])));
  }
  // The norm is summed in double on both sides, in other orders: the float norm, and so
  // the clipping factor and every update, come out bit-identical.
  EXPECT_EQ(worst, 0.0) << "the same clipping factor";
  // Without the reduction each shard would clip by its own, smaller norm: visibly different.
  auto lone_model = net();
  auto lone = make_sharded_optimizer(oc, lone_model->parameters(), cut(*lone_model, 2)[0]);
  set_grads(*lone_model, 0);
  lone->step(0.5f);
  const ParamRange first = parts[0].front();
  EXPECT_NE(lone_model->parameters()[first.param]->value.to_vector()[first.first],
            sharded_model->parameters()[first.param]->value.to_vector()[first.first]);
}
