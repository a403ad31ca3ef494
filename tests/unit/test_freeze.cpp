// Frozen parameters and fine-tuning (runtime/freeze.h, load_weights in
// runtime/checkpoint/checkpoint.h): a frozen parameter gets no gradient and keeps its value
// bit for bit under SGD and AdamW; the optimizer holds no state for it; training with frozen
// layers is bit-identical to leaving those parameters out of the optimizer; every layer with
// parameters still passes the input gradient through a frozen weight; the reducer buckets
// and ZeRO leave frozen parameters out; resuming refuses another frozen set; load_weights
// matches by name, refuses naming every mismatch and honours skip patterns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/process_group.h"
#include "train/fine_tune.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/freeze.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/tied_linear.h"
#include "runtime/strategy/reducer.h"
#include "runtime/strategy/zero.h"
#include "tests/checkpoint/tiny_model.h"
#include "tests/support/temp_dir.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using test::make_mlp;

struct TempDir : tandem::testing::TempDir {
  TempDir() : tandem::testing::TempDir("tandem_test_freeze") {}
  std::string str() const { return path().string(); }
};

std::string bytes_of(const Tensor& t) { return {static_cast<const char*>(t.raw()), t.nbytes()}; }
bool all_zero(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.f32()[i] != 0.f) return false;
  return true;
}
Tensor random_tensor(const Shape& shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  fill_uniform(v, rng, 1.0f);
  return Tensor::from_vector(v, shape);
}

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.momentum = 0.9f;
  c.nesterov = true;
  c.weight_decay = 0.01f;  // would move a frozen weight even with a zero gradient
  return c;
}
OptimizerConfig adamw() {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 0.1f;
  return c;
}

// One step: forward, the gradient of 0.5 * |y - target|^2, backward, then the update.
void train_step(Model& m, Optimizer& opt, uint64_t seed) {
  m.zero_grad();
  const Tensor x = random_tensor({4, 8}, seed);
  const Tensor target = random_tensor({4, 4}, seed + 1);
  Tensor y = m.forward(x);
  Tensor dy = Tensor::empty(y.shape());
  for (int64_t i = 0; i < y.numel(); ++i) dy.f32()[i] = (y.f32()[i] - target.f32()[i]) / 4.f;
  m.backward(dy);
  opt.step(0.05f);
}

class FrozenTraining : public ::testing::TestWithParam<OptimizerConfig (*)()> {};

TEST_P(FrozenTraining, FrozenLinearGetsNoGradientKeepsItsValueAndHasNoState) {
  auto m = make_mlp(8, 16, 4, 7, 3);
  EXPECT_EQ(freeze_parameters(*m, {"fc2.*"}), 2);
  EXPECT_EQ(frozen_parameter_names(*m), (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  const std::string w0 = bytes_of(m->find("fc2.weight")->value), b0 = bytes_of(m->find("fc2.bias")->value);
  const std::string fc1 = bytes_of(m->find("fc1.weight")->value);
  auto opt = make_optimizer(GetParam()(), m->parameters());
  for (const auto& [name, t] : opt->state()) EXPECT_EQ(name.rfind("fc2.", 0), std::string::npos) << name;
  EXPECT_EQ(opt->state().size(), 4 * opt->slot_names().size());  // fc1, fc3: weight and bias
  EXPECT_EQ(opt->state_bytes(),
            trainable_parameter_count(*m) * static_cast<int64_t>(opt->slot_names().size() * sizeof(float)));
  for (int s = 0; s < 5; ++s) {
    train_step(*m, *opt, 100 + s);
    EXPECT_TRUE(all_zero(m->find("fc2.weight")->grad));
    EXPECT_TRUE(all_zero(m->find("fc2.bias")->grad));
    EXPECT_FALSE(all_zero(m->find("fc1.weight")->grad));
  }
  EXPECT_EQ(bytes_of(m->find("fc2.weight")->value), w0);
  EXPECT_EQ(bytes_of(m->find("fc2.bias")->value), b0);
  EXPECT_NE(bytes_of(m->find("fc1.weight")->value), fc1);
}

TEST_P(FrozenTraining, IsBitIdenticalToLeavingTheParametersOutOfTheOptimizer) {
  for (const std::vector<std::string>& patterns :
       {std::vector<std::string>{"fc1.*"}, {"fc2.weight"}, {"fc3.bias", "fc1.weight"}}) {
    OptimizerConfig oc = GetParam()();
    oc.clip_grad_norm = 0.5f;  // the frozen gradients must not count in the norm either
    auto frozen = make_mlp(8, 16, 4, 3, 3), plain = make_mlp(8, 16, 4, 3, 3);
    freeze_parameters(*frozen, patterns);
    std::vector<Parameter*> others;
    for (Parameter* p : plain->parameters())
      if (!matches_any(patterns, p->name)) others.push_back(p);
    auto a = make_optimizer(oc, frozen->parameters()), b = make_optimizer(oc, others);
    for (int s = 0; s < 6; ++s) {
      train_step(*frozen, *a, 200 + s);
      train_step(*plain, *b, 200 + s);
    }
    EXPECT_EQ(parameter_checksum(*frozen), parameter_checksum(*plain)) << patterns.front();
    ASSERT_EQ(a->state().size(), b->state().size());
    for (size_t i = 0; i < a->state().size(); ++i) {
      EXPECT_EQ(a->state()[i].first, b->state()[i].first);
      EXPECT_EQ(bytes_of(a->state()[i].second), bytes_of(b->state()[i].second)) << a->state()[i].first;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FrozenTraining, ::testing::Values(&sgd, &adamw),
                         [](const auto& info) { return info.index == 0 ? std::string("Sgd") : std::string("AdamW"); });

// Two copies of a layer, `frozen` with `patterns` frozen: the same forward and backward give
// the same input gradient, no gradient for the frozen parameters and the same for the rest.
void expect_frozen_backward(Module& frozen, Module& plain, const std::vector<std::string>& patterns, const Tensor& x,
                            uint64_t seed) {
  frozen.reset_parameters(1);
  plain.reset_parameters(1);
  for (Parameter* p : frozen.parameters())
    if (matches_any(patterns, p->name)) p->requires_grad = false;
  Tensor ya = frozen.forward(x), yb = plain.forward(x);
  ASSERT_EQ(bytes_of(ya), bytes_of(yb));
  const Tensor dy = random_tensor(ya.shape(), seed);
  Tensor dxa = frozen.backward(dy), dxb = plain.backward(dy);
  ASSERT_EQ(dxa.defined(), dxb.defined());
  if (dxa.defined()) {
    EXPECT_EQ(bytes_of(dxa), bytes_of(dxb)) << frozen.kind();
  }
  const auto pa = frozen.parameters(), pb = plain.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!pa[i]->requires_grad) {
      EXPECT_TRUE(all_zero(pa[i]->grad)) << frozen.kind() << " " << pa[i]->name;
    } else {
      EXPECT_EQ(bytes_of(pa[i]->grad), bytes_of(pb[i]->grad)) << frozen.kind() << " " << pa[i]->name;
    }
  }
}

TEST(FrozenLayers, StillPassTheInputGradientAndSkipOnlyTheFrozenGradients) {
  for (const std::vector<std::string>& which : {std::vector<std::string>{"*"}, {"weight"}, {"bias"}}) {
    SCOPED_TRACE(which.front());
    Linear la(6, 5), lb(6, 5);
    expect_frozen_backward(la, lb, which, random_tensor({3, 6}, 1), 2);
    Conv2d ca(2, 3, 3, 1, 1), cb(2, 3, 3, 1, 1);
    expect_frozen_backward(ca, cb, which, random_tensor({2, 2, 5, 5}, 3), 4);
    LayerNorm na(6), nb(6);
    expect_frozen_backward(na, nb, which, random_tensor({4, 6}, 5), 6);
  }
  // Embedding (no input gradient) and the tied head that borrows its weight.
  Embedding ea(10, 4), eb(10, 4);
  Tensor ids = Tensor::empty({3}, DType::i32);
  for (int i = 0; i < 3; ++i) ids.data<int32_t>()[i] = 2 * i + 1;
  expect_frozen_backward(ea, eb, {"weight"}, ids, 7);
  Parameter& wa = *ea.parameters()[0];
  TiedLinear ta(wa), tb(*eb.parameters()[0]);
  const Tensor h = random_tensor({3, 4}, 8), dy = random_tensor({3, 10}, 9);
  ta.forward(h);
  tb.forward(h);
  Tensor dxa = ta.backward(dy), dxb = tb.backward(dy);
  EXPECT_EQ(bytes_of(dxa), bytes_of(dxb));
  EXPECT_TRUE(all_zero(wa.grad));
  EXPECT_FALSE(all_zero(eb.parameters()[0]->grad));
}

// A frozen body: Model::backward stops at the first layer with a trainable parameter (its
// input-gradient product skipped too), and the trainable gradients are bit-identical to a
// backward through every layer (forced by asking the first layer for its input gradient).
TEST(FrozenLayers, BackwardStopsAtTheFirstTrainableLayer) {
  auto build = [] {
    auto m = std::make_unique<Model>();
    m->add("fc1", std::make_unique<Linear>(8, 16));
    m->add("relu1", std::make_unique<ReLU>());
    m->add("fc2", std::make_unique<Linear>(16, 16));
    m->add("relu2", std::make_unique<ReLU>());
    m->add("fc3", std::make_unique<Linear>(16, 4));
    m->reset_parameters(3);
    freeze_parameters(*m, {"fc1.*", "fc2.weight"});  // fc2.bias trains: fc2 is the first trainable layer
    return m;
  };
  auto short_cut = build(), every_layer = build();
  every_layer->layer(0).set_needs_input_grad(true);
  const Tensor x = random_tensor({5, 8}, 11), dy = random_tensor({5, 4}, 12);
  short_cut->forward(x);
  every_layer->forward(x);
  EXPECT_FALSE(short_cut->backward(dy).defined()) << "no input gradient when the layers before fc2 are skipped";
  EXPECT_TRUE(every_layer->backward(dy).defined());
  for (size_t i = 0; i < short_cut->parameters().size(); ++i)
    EXPECT_EQ(bytes_of(short_cut->parameters()[i]->grad), bytes_of(every_layer->parameters()[i]->grad))
        << short_cut->parameters()[i]->name;
  EXPECT_TRUE(all_zero(short_cut->find("fc1.weight")->grad));
  EXPECT_FALSE(all_zero(short_cut->find("fc2.bias")->grad));
  EXPECT_TRUE(short_cut->layer(2).needs_input_grad()) << "the flag is restored after the backward";
}

TEST(Freeze, PatternsMatchNamesAndGlobsAndATyposIsRefusedNamingIt) {
  auto m = make_mlp(8, 16, 4, 1, 3);
  EXPECT_TRUE(glob_match("fc?.weight", "fc1.weight"));
  EXPECT_TRUE(glob_match("*", "blocks.0.attn.qkv.weight"));  // '*' crosses dots
  EXPECT_FALSE(glob_match("fc1", "fc1.weight"));              // whole names only
  EXPECT_EQ(freeze_parameters(*m, {"fc1.weight", "fc1.*", "*.bias"}), 4);  // each counted once
  EXPECT_EQ(frozen_parameter_names(*m), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.bias", "fc3.bias"}));
  EXPECT_EQ(unfreeze_parameters(*m, {"*.bias"}), 3);
  EXPECT_EQ(frozen_parameter_names(*m), (std::vector<std::string>{"fc1.weight"}));
  try {
    freeze_parameters(*m, {"fc2.weight", "fc9.*"});
    FAIL() << "a pattern matching nothing was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'fc9.*'"), std::string::npos) << what;
    EXPECT_NE(what.find("fc1.weight, fc1.bias, fc2.weight"), std::string::npos) << what;
  }
  EXPECT_TRUE(m->find("fc2.weight")->requires_grad);  // nothing changed
}

// A group of `size` ranks whose peers hold exactly this rank's data: averages keep the
// buffer, broadcasts keep rank 0's (ours); a world of 1 also gathers and scatters in place.
class MirrorGroup final : public ProcessGroup {
 public:
  explicit MirrorGroup(int size) : ProcessGroup(Setup{"mirror", 0, size, std::chrono::seconds(5), {}, {}}) {}
  std::vector<const void*> allreduced;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override {
    allreduced.push_back(c.out.data);
    return completed(c);
  }
  std::shared_ptr<Work> run_broadcast(const Collective& c) override { return completed(c); }
  std::shared_ptr<Work> run_allgather(const Collective& c) override { return completed(c); }
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override { return completed(c); }
  bool accepts(Device device) const override { return device.is_cpu(); }

 private:
  std::shared_ptr<Work> completed(const Collective& c) {
    auto work = std::make_shared<CompletionWork>(
        c, timeout(), [](const Collective& op, std::chrono::milliseconds) { return op.describe() + " timed out"; });
    work->finish();
    return work;
  }
};

TEST(FrozenReducer, BucketsLeaveFrozenParametersOutAndIgnoreTheirReadyMarks) {
  auto m = make_mlp(8, 16, 4, 1, 3);  // fc1 (16x8 + 16), fc2 (16x16 + 16), fc3 (4x16 + 4)
  freeze_parameters(*m, {"fc2.*", "fc3.bias"});
  const std::vector<Parameter*>& ps = m->parameters();
  auto group = std::make_shared<MirrorGroup>(2);
  ReducerOptions o;
  o.first_bucket_cap_bytes = 300;  // fc3.weight (256 B) alone, then the rest
  o.bucket_cap_bytes = 1 << 20;
  Reducer r(ps, group, o);
  const std::vector<std::vector<size_t>> layout = {{4}, {1, 0}};  // no fc2.* (2, 3), no fc3.bias (5)
  EXPECT_EQ(r.bucket_layout(), layout);
  std::vector<BucketInfo> info = r.bucket_info();
  ASSERT_EQ(info.size(), 2u);
  EXPECT_EQ(info[0].bytes, 4 * 16 * 4);
  EXPECT_EQ(info[1].bytes, (16 * 8 + 16) * 4);
  EXPECT_EQ(info[0].parameters + info[1].parameters, 3);
  // A frozen gradient is no view of a bucket; a trained one is.
  EXPECT_TRUE(ps[0]->grad.shares_storage_with(ps[1]->grad));
  for (size_t frozen : {2, 3, 5})
    for (size_t trained : {0, 4}) EXPECT_FALSE(ps[frozen]->grad.shares_storage_with(ps[trained]->grad));
  for (int step = 0; step < 2; ++step) {  // the second backward runs on the rebuilt buckets
    r.prepare_for_backward();
    group->allreduced.clear();
    m->set_grad_ready_hook([&](Parameter& p) { r.mark_ready(p); });  // frozen marks arrive too
    Tensor y = m->forward(random_tensor({2, 8}, 3));
    m->backward(random_tensor(y.shape(), 4));
    PhaseTimes t;
    r.finalize_backward(t);  // nothing waits for the frozen parameters
    EXPECT_EQ(group->allreduced.size(), 2u);
    EXPECT_EQ(r.bucket_layout(), layout);
  }
  // Only frozen marks: the buckets still wait for the trained parameters, naming them.
  r.prepare_for_backward();
  r.mark_ready(*ps[2]);
  r.mark_ready(*ps[2]);  // ignored, not "marked twice"
  PhaseTimes t;
  try {
    r.finalize_backward(t);
    FAIL() << "a backward with no trained gradient ready passed";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("3 parameter(s) received no gradient"), std::string::npos) << what;
    EXPECT_EQ(what.find("fc2"), std::string::npos) << what;
  }
}

TEST(FrozenZero, NoShardNoStateAndTheFrozenValueNeverMoves) {
  auto m = make_mlp(8, 16, 4, 1, 3);
  freeze_parameters(*m, {"fc2.weight"});
  const std::string frozen0 = bytes_of(m->find("fc2.weight")->value);
  auto group = std::make_shared<MirrorGroup>(1);
  ReducerOptions o;
  o.zero_stage = 1;
  o.first_bucket_cap_bytes = 300;
  Reducer r(m->parameters(), group, o);
  ZeroShards z(m->parameters(), r.layouts(), group, adamw(), std::chrono::seconds(5));
  m->set_forward_pre_hook([&](Module& layer) { z.wait_for(layer); });
  m->set_grad_ready_hook([&](Parameter& p) { r.mark_ready(p); });
  EXPECT_EQ(z.full_state_bytes(), trainable_parameter_count(*m) * 2 * 4);
  EXPECT_EQ(z.optimizer().state_bytes(), z.full_state_bytes());  // one rank holds every shard
  for (int step = 0; step < 3; ++step) {
    m->zero_grad();
    z.begin_forward();
    r.prepare_for_backward();
    Tensor y = m->forward(random_tensor({2, 8}, 10 + step));
    m->backward(random_tensor(y.shape(), 20 + step));
    PhaseTimes t;
    r.finalize_backward(t);
    z.end_forward_backward(t);
    z.step(0.01f);
  }
  z.wait_all();
  EXPECT_EQ(bytes_of(m->find("fc2.weight")->value), frozen0);
  std::unique_ptr<Optimizer> full = z.full_optimizer(true);
  std::vector<std::string> names;
  for (const auto& [name, t] : full->state()) names.push_back(name);
  EXPECT_EQ(names.size(), 5u * 2);
  for (const std::string& n : names) EXPECT_EQ(n.rfind("fc2.weight.", 0), std::string::npos) << n;
  // The full state goes back into the shards unchanged.
  const std::string before = bytes_of(full->state().back().second);
  z.load_from(*full);
  EXPECT_EQ(bytes_of(z.full_optimizer(true)->state().back().second), before);
  // A sharded optimizer refuses a range of a frozen parameter.
  EXPECT_THROW(make_sharded_optimizer(sgd(), m->parameters(), {{2, 0, 4}}), std::invalid_argument);
}

CheckpointMeta meta_for(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.seed = 1;
  meta.dataset = "synthetic";
  meta.batch_size = 4;
  meta.replicas = 1;
  meta.model_name = "mlp";
  meta.hidden = 16;
  meta.input_shape = {1, 2, 4};
  meta.classes = 4;
  meta.mode = "single";
  meta.world_size = 1;
  return meta;
}

TEST(FrozenCheckpoint, ResumesIntoTheSameFrozenSetAndRefusesAnotherNamingTheParameters) {
  TempDir dir;
  auto a = make_mlp(8, 16, 4, 1, 3);
  freeze_parameters(*a, {"fc1.*"});
  auto oa = make_optimizer(adamw(), a->parameters());
  for (int s = 0; s < 3; ++s) train_step(*a, *oa, 30 + s);
  const std::string path = save_checkpoint(dir.str(), *a, *oa, meta_for(3));

  auto b = make_mlp(8, 16, 4, 2, 3);
  freeze_parameters(*b, {"fc1.*"});
  auto ob = make_optimizer(adamw(), b->parameters());
  load_checkpoint(path, *b, ob.get());
  EXPECT_EQ(parameter_checksum(*a), parameter_checksum(*b));
  for (size_t i = 0; i < oa->state().size(); ++i)
    EXPECT_EQ(bytes_of(oa->state()[i].second), bytes_of(ob->state()[i].second)) << oa->state()[i].first;

  auto expect_refused = [&](const std::string& ckpt, const std::vector<std::string>& freeze, const char* says) {
    auto c = make_mlp(8, 16, 4, 2, 3);
    if (!freeze.empty()) freeze_parameters(*c, freeze);
    const std::string before = parameter_checksum(*c);
    auto oc = make_optimizer(adamw(), c->parameters());
    try {
      load_checkpoint(ckpt, *c, oc.get());
      FAIL() << "resumed with another frozen set";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_NE(what.find("fc1.weight, fc1.bias"), std::string::npos) << what;
      EXPECT_NE(what.find("--init-from"), std::string::npos) << what;
    }
    EXPECT_EQ(parameter_checksum(*c), before);  // nothing loaded
  };
  expect_refused(path, {}, "trained now but frozen then");
  TempDir plain_dir;
  auto p = make_mlp(8, 16, 4, 1, 3);
  auto op = make_optimizer(adamw(), p->parameters());
  train_step(*p, *op, 40);
  expect_refused(save_checkpoint(plain_dir.str(), *p, *op, meta_for(1)), {"fc1.*"}, "frozen now but trained then");
}

TEST(LoadWeights, MatchesByNameRefusesNamingEveryMismatchAndHonoursSkips) {
  TempDir dir;
  auto src = make_mlp(8, 16, 4, 5, 3);
  auto opt = make_optimizer(sgd(), src->parameters());
  train_step(*src, *opt, 50);
  const std::string ckpt = save_checkpoint(dir.str(), *src, *opt, meta_for(7));

  // The same architecture: every tensor, from the checkpoint, the root (newest) or the file.
  for (const std::string& from : {ckpt, dir.str(), (fs::path(ckpt) / kModelFile).string()}) {
    auto m = make_mlp(8, 16, 4, 99, 3);
    LoadWeightsResult r = load_weights(from, *m);
    EXPECT_EQ(r.loaded.size(), 6u) << from;
    EXPECT_TRUE(r.skipped.empty());
    EXPECT_EQ(parameter_checksum(*m), parameter_checksum(*src)) << from;
  }

  // Another width and depth: refused, every mismatch named with its shapes, nothing loaded.
  auto wider = make_mlp(8, 32, 4, 99, 4);
  const std::string before = parameter_checksum(*wider);
  try {
    load_weights(ckpt, *wider);
    FAIL() << "a mismatched checkpoint was loaded";
  } catch (const WeightsMismatch& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.missing, (std::vector<std::string>{"fc4.weight (F32 [4, 32])", "fc4.bias (F32 [4])"}));
    EXPECT_TRUE(e.unexpected.empty());
    ASSERT_EQ(e.reshaped.size(), 6u);  // fc1 .. fc3, weights and biases: every width differs
    EXPECT_EQ(e.reshaped[0], "fc1.weight (F32 [16, 8] in the checkpoint, F32 [32, 8] in the model)");
    for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias",
                             "fc4.weight", "fc4.bias"})
      EXPECT_NE(what.find(name), std::string::npos) << name << " not in: " << what;
    EXPECT_NE(what.find("8 tensor(s) do not match the model, nothing was loaded"), std::string::npos) << what;
  }
  EXPECT_EQ(parameter_checksum(*wider), before);

  // Fewer layers: the checkpoint's extra tensors are unexpected.
  auto shallow = make_mlp(8, 16, 4, 99, 2);
  try {
    load_weights(ckpt, *shallow);
    FAIL() << "unexpected tensors were accepted";
  } catch (const WeightsMismatch& e) {
    EXPECT_EQ(e.unexpected, (std::vector<std::string>{"fc3.bias (F32 [4])", "fc3.weight (F32 [4, 16])"}));
    EXPECT_EQ(e.reshaped.size(), 2u);  // fc2 is 16 -> 4 here, 16 -> 16 there
    EXPECT_EQ(std::string(e.what()).find("fc1."), std::string::npos) << e.what();  // fc1 matches
  }

  // A new head: skip it and it keeps its fresh initialisation; the rest loads.
  auto head = make_mlp(8, 16, 6, 99, 3);
  const std::string fresh = bytes_of(head->find("fc3.weight")->value);
  LoadWeightsResult r = load_weights(ckpt, *head, {"fc3.*"});
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(r.skipped, (std::vector<std::string>{"fc3.weight", "fc3.bias"}));
  EXPECT_EQ(bytes_of(head->find("fc3.weight")->value), fresh);
  EXPECT_EQ(bytes_of(head->find("fc2.weight")->value), bytes_of(src->find("fc2.weight")->value));
  // Skipped tensors of the file that the model lacks are ignored, not unexpected.
  auto two = make_mlp(8, 16, 16, 99, 2);
  r = load_weights(ckpt, *two, {"fc3.*"});
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"fc3.bias", "fc3.weight"}));

  EXPECT_THROW(load_weights((dir.path() / "nope").string(), *head), std::invalid_argument);
}

TEST(FineTuneFactory, LoadsThenFreezesAndMakesMismatchesUsageErrors) {
  TempDir dir;
  ModelConfig mc;
  mc.hidden = 16;
  auto src = build_model(mc, 1);
  auto opt = make_optimizer(sgd(), src->parameters());
  const std::string ckpt = save_checkpoint(dir.str(), *src, *opt, meta_for(1));
  TrainConfig c;
  c.seed = 2;
  c.init_from = ckpt;
  c.freeze = {"fc1.*"};
  std::unique_ptr<Model> m = fine_tune_model_factory(mc, c)();
  EXPECT_EQ(parameter_checksum(*m), parameter_checksum(*src));
  EXPECT_EQ(frozen_parameter_names(*m), (std::vector<std::string>{"fc1.weight", "fc1.bias"}));

  ModelConfig other = mc;
  other.hidden = 8;
  try {
    fine_tune_model_factory(other, c)();
    FAIL() << "a mismatched --init-from was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--init-from"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fc2.weight"), std::string::npos) << e.what();
  }
  c.init_from.clear();
  c.freeze = {"*"};
  EXPECT_THROW(fine_tune_model_factory(mc, c)(), UsageError);  // nothing would train
  c.freeze = {"head.*"};
  EXPECT_THROW(fine_tune_model_factory(mc, c)(), UsageError);  // matches nothing
}

}  // namespace
}  // namespace tandem
