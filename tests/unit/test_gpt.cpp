// The GPT model (zoo/gpt.h) end to end on the CPU: its parameter registry and names,
// gradient-ready firing through nested modules and the tied embedding, DataParallel
// against single, AdamW's decay rule and clipping, sampling, and the reference check
// against PyTorch (tests/data/gpt_reference.safetensors, written by
// scripts/make-gpt-reference): logits and loss within 1e-4 relative, every gradient
// within 1e-3, and the losses of 10 AdamW steps within 1e-4.
#include <gtest/gtest.h>

#include "tests/support/finite_differences.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "zoo/generate.h"
#include "zoo/gpt.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/kernels.h"
#include "runtime/layers/loss.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/single.h"

using namespace tandem;

namespace {

GptConfig tiny(int64_t vocab = 11) { return GptConfig{vocab, 2, 2, 8, 6, 0.f}; }

Batch tokens(int64_t step, int64_t rows, int64_t t, int32_t vocab) {
  Batch b;
  b.inputs = Tensor::empty({rows, t}, DType::i32);
  b.labels = Tensor::empty({rows * t}, DType::i32);
  uint64_t s = 977 * (step + 1);
  for (int64_t i = 0; i < rows * t; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b.inputs.data<int32_t>()[i] = static_cast<int32_t>((s >> 33) % vocab);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b.labels.data<int32_t>()[i] = static_cast<int32_t>((s >> 33) % vocab);
  }
  return b;
}

using tandem::testing::relative_error;

}  // namespace

TEST(Gpt, ParametersAreNamedAsPyTorchsAndTheLmHeadIsTied) {
  GptModel m(GptConfig{65, 4, 4, 128, 64, 0.f}, 0);
  std::vector<std::string> names;
  for (const Parameter* p : m.parameters()) names.push_back(p->name);
  ASSERT_EQ(names.size(), 2u + 4u * 12u + 2u);
  EXPECT_EQ(names[0], "wte.weight");
  EXPECT_EQ(names[1], "wpe.weight");
  const std::vector<std::string> block = {"ln1.weight",    "ln1.bias",      "attn.qkv.weight", "attn.qkv.bias",
                                          "attn.proj.weight", "attn.proj.bias", "ln2.weight",    "ln2.bias",
                                          "mlp.fc.weight", "mlp.fc.bias",   "mlp.proj.weight", "mlp.proj.bias"};
  for (size_t i = 0; i < block.size(); ++i) EXPECT_EQ(names[2 + 12 * 3 + i], "blocks.3." + block[i]);
  EXPECT_EQ(names[names.size() - 2], "ln_f.weight");
  EXPECT_EQ(names.back(), "ln_f.bias");
  // nanoGPT's baby GPT: 65*128 + 64*128 + 4 * (12*128^2 + 13*128) + 2*128 (no separate LM head).
  EXPECT_EQ(m.num_parameters(), 809856);
  EXPECT_EQ(m.find("blocks.0.attn.qkv.weight")->value.shape(), (Shape{384, 128}));
  EXPECT_EQ(m.find("blocks.0.mlp.proj.weight")->value.shape(), (Shape{128, 512}));
}

TEST(Gpt, InitialisationIsGpt2s) {
  GptModel m(GptConfig{65, 4, 4, 128, 64, 0.f}, 3);
  auto stddev = [](const Parameter* p) {
    double s = 0;
    for (float v : p->value.to_vector()) s += static_cast<double>(v) * v;
    return std::sqrt(s / static_cast<double>(p->value.numel()));
  };
  EXPECT_NEAR(stddev(m.find("wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.find("blocks.1.attn.qkv.weight")), 0.02, 0.0005);
  EXPECT_NEAR(stddev(m.find("blocks.1.mlp.proj.weight")), 0.02 / std::sqrt(8.0), 0.0003);
  EXPECT_NEAR(stddev(m.find("blocks.1.attn.proj.weight")), 0.02 / std::sqrt(8.0), 0.0003);
  for (float v : m.find("blocks.2.mlp.fc.bias")->value.to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : m.find("ln_f.weight")->value.to_vector()) EXPECT_EQ(v, 1.f);
  // The same (seed, name) draws the same values whatever else the model holds.
  GptModel other(GptConfig{65, 2, 4, 128, 64, 0.f}, 3);
  EXPECT_EQ(m.find("blocks.1.attn.qkv.weight")->value.to_vector(),
            other.find("blocks.1.attn.qkv.weight")->value.to_vector());
}

TEST(Gpt, BadConfigurationsNameTheFlag) {
  auto message = [](GptConfig c) {
    try {
      check_gpt_config(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GptConfig c = tiny();
  c.n_embd = 10;
  c.n_head = 4;
  EXPECT_NE(message(c).find("--n-embd (10) must be divisible by --n-head (4)"), std::string::npos);
  c = tiny();
  c.context = 0;
  EXPECT_NE(message(c).find("--context"), std::string::npos);
  GptModel m(tiny(), 0);
  Tensor too_long = Tensor::zeros({1, 7}, DType::i32);
  EXPECT_THROW(m.forward(too_long), std::invalid_argument);
  Tensor bad_id = Tensor::zeros({1, 2}, DType::i32);
  bad_id.data<int32_t>()[1] = 11;
  EXPECT_THROW(m.forward(bad_id), std::out_of_range);
}

// Each parameter is reported once, as soon as its gradient is final: a block's MLP before
// its attention has run backward, and the tied wte.weight only after the embedding, its
// last use in backward (the LM head added into it first).
TEST(Gpt, GradientReadyFiresOnceAndAsEarlyAsEachGradientIsFinal) {
  GptModel m(tiny(), 5);
  std::vector<std::string> order;
  bool qkv_untouched_when_fc_ready = false, wte_complete = false;
  Tensor wte_grad_after_head;
  m.set_grad_ready_hook([&](Parameter& p) {
    order.push_back(p.name);
    if (p.name == "blocks.1.mlp.fc.weight") {
      auto g = m.find("blocks.1.attn.qkv.weight")->grad.to_vector();
      qkv_untouched_when_fc_ready = std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; });
    }
    if (p.name == "wte.weight") wte_complete = order.size() == m.parameters().size();
  });
  m.zero_grad();
  Batch b = tokens(0, 3, 6, 11);
  SoftmaxCrossEntropy loss;
  Tensor logits = m.forward(b.inputs);
  ASSERT_EQ(logits.shape(), (Shape{18, 11}));
  loss.forward(logits, b.labels);
  m.backward(loss.dlogits(1.f / 18));
  std::set<std::string> unique(order.begin(), order.end());
  EXPECT_EQ(order.size(), m.parameters().size());
  EXPECT_EQ(unique.size(), order.size());
  EXPECT_EQ(order.front(), "ln_f.bias");
  EXPECT_EQ(order[2], "blocks.1.mlp.proj.bias");
  EXPECT_EQ(order.back(), "wte.weight");
  EXPECT_TRUE(qkv_untouched_when_fc_ready);
  EXPECT_TRUE(wte_complete);
}

// The tied gradient holds both uses: the embedding rows of ids that never occur as input
// still get the LM head's gradient.
TEST(Gpt, TiedWeightGetsBothContributions) {
  GptModel m(tiny(), 5);
  m.zero_grad();
  Batch b = tokens(1, 2, 6, 11);
  for (int64_t i = 0; i < b.inputs.numel(); ++i) b.inputs.data<int32_t>()[i] %= 5;  // ids 0..4 only
  SoftmaxCrossEntropy loss;
  loss.forward(m.forward(b.inputs), b.labels);
  m.backward(loss.dlogits(1.f / 12));
  auto g = m.find("wte.weight")->grad.to_vector();
  for (int64_t row : {7, 9}) {
    double norm = 0;
    for (int64_t c = 0; c < 8; ++c) norm += std::fabs(g[row * 8 + c]);
    EXPECT_GT(norm, 0) << "row " << row << " (never an input) has the LM head's gradient";
  }
}

// Central differences of the mean loss against the model's gradients at sampled coordinates.
class GptAttention : public ::testing::TestWithParam<AttentionKernel> {};

TEST_P(GptAttention, GradientsMatchFiniteDifferences) {
  set_cpu_threads(1);
  GptConfig config = tiny();
  config.attention = GetParam();
  GptModel m(config, 9);
  Batch b = tokens(2, 2, 6, 11);
  SoftmaxCrossEntropy loss;
  auto mean_loss = [&] { return loss.forward(m.forward(b.inputs), b.labels); };
  m.zero_grad();
  mean_loss();
  m.backward(loss.dlogits(1.f / 12));
  for (Parameter* p : m.parameters()) {
    const auto grad = p->grad.to_vector();
    float* v = p->value.f32();
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t i = (k * 7919 + 13) % p->value.numel();
      const float saved = v[i], eps = 1e-3f;  // GPT-2 init keeps activations near 0.02: small steps
      v[i] = saved + eps;
      const double up = mean_loss();
      v[i] = saved - eps;
      const double down = mean_loss();
      v[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 5e-4 + 2e-2 * std::fabs(numeric)) << p->name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GptAttention,
                         ::testing::Values(AttentionKernel::materialized, AttentionKernel::tiled),
                         [](const auto& info) { return std::string(attention_kernel_name(info.param)); });

TEST(Gpt, DataParallelEqualsSingle) {
  set_cpu_threads(1);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.weight_decay = 0.1f;
  oc.clip_grad_norm = 1.f;
  std::vector<std::unique_ptr<Model>> replicas;
  replicas.push_back(std::make_unique<GptModel>(tiny(), 4));
  replicas.push_back(std::make_unique<GptModel>(tiny(), 4));
  DataParallelStrategy dp(std::move(replicas), oc, {Device::cpu(), Device::cpu()});
  SingleStrategy single(std::make_unique<GptModel>(tiny(), 4), oc, Device::cpu());
  for (int64_t s = 0; s < 5; ++s) {
    std::vector<Batch> batch{tokens(s, 4, 6, 11)};
    PhaseTimes t1, t2;
    const double l1 = dp.forward_backward(batch, t1).loss(), l2 = single.forward_backward(batch, t2).loss();
    EXPECT_NEAR(l1, l2, 1e-5 * std::fabs(l2));
    for (size_t i = 0; i < single.model().parameters().size(); ++i)
      EXPECT_LT(relative_error(dp.model().parameters()[i]->grad.to_vector(),
                               single.model().parameters()[i]->grad.to_vector()),
                1e-5)
          << single.model().parameters()[i]->name << " at step " << s;
    dp.step(1e-2f, t1);
    single.step(1e-2f, t2);
  }
}

TEST(Gpt, AdamWDecaysMatricesAndEmbeddingsOnly) {
  GptModel m(tiny(), 1);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.weight_decay = 0.5f;
  auto opt = make_optimizer(oc, m.parameters());
  std::map<std::string, std::vector<float>> before;
  for (Parameter* p : m.parameters()) {
    std::vector<float> ones(static_cast<size_t>(p->value.numel()), 1.f);
    p->value.copy_from(Tensor::from_vector(ones, p->value.shape()));
    before[p->name] = ones;
  }
  m.zero_grad();  // a zero gradient: only the decay moves a parameter
  opt->step(0.1f);
  for (Parameter* p : m.parameters()) {
    const float want = p->value.ndim() >= 2 ? 1.f - 0.1f * 0.5f : 1.f;
    for (float v : p->value.to_vector()) ASSERT_FLOAT_EQ(v, want) << p->name;
  }
}

TEST(Gpt, ClippingScalesToTheGlobalNormAndLeavesSmallerGradientsAlone) {
  Parameter a{"a", Tensor::zeros({2, 2}), Tensor::from_vector({3, 0, 0, 0}, {2, 2})};
  Parameter b{"b", Tensor::zeros({1}), Tensor::from_vector({4}, {1})};
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.momentum = 0.f;
  oc.clip_grad_norm = 1.f;  // the norm is 5: everything scales by 1 / (5 + 1e-6)
  auto opt = make_optimizer(oc, {&a, &b});
  opt->step(1.f);
  const float coef = 1.f / (5.f + 1e-6f);
  EXPECT_FLOAT_EQ(a.value.to_vector()[0], -3.f * coef);
  EXPECT_FLOAT_EQ(b.value.to_vector()[0], -4.f * coef);
  // A norm under the limit leaves the gradients bit-identical.
  Parameter c{"c", Tensor::zeros({2}), Tensor::from_vector({0.3f, 0.4f}, {2})};
  oc.clip_grad_norm = 10.f;
  auto opt2 = make_optimizer(oc, {&c});
  opt2->step(1.f);
  EXPECT_EQ(c.grad.to_vector(), (std::vector<float>{0.3f, 0.4f}));
  EXPECT_EQ(c.value.to_vector(), (std::vector<float>{-0.3f, -0.4f}));
}

TEST(Gpt, SamplingIsAPureFunctionOfSeedAndPrompt) {
  GptModel m(tiny(4), 2);
  const std::vector<uint8_t> vocab = {'\n', 'a', 'b', 'c'};
  SampleOptions so;
  so.length = 40;
  so.seed = 7;
  so.prompt = "ab";
  const std::string first = sample_text(m, vocab, so);
  EXPECT_EQ(first.size(), 40u);
  EXPECT_EQ(first, sample_text(m, vocab, so));
  for (char ch : first) EXPECT_NE(std::find(vocab.begin(), vocab.end(), static_cast<uint8_t>(ch)), vocab.end());
  so.seed = 8;
  EXPECT_NE(first, sample_text(m, vocab, so));
  so.prompt = "abz";
  EXPECT_THROW(sample_text(m, vocab, so), std::invalid_argument);
}

TEST(Gpt, CheckpointMetaCarriesTheShapeAndVocabulary) {
  TextDataset text;
  text.vocab = {'\n', ' ', 'A', 'z', 0xc3};
  CheckpointMeta meta;
  meta.model_name = "gpt";
  GptConfig c{5, 3, 2, 16, 32, 0.25f};
  save_gpt_meta(c, text, meta);
  const GptConfig back = gpt_config_from_meta(meta);
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.n_head, 2);
  EXPECT_EQ(back.n_embd, 16);
  EXPECT_EQ(back.context, 32);
  EXPECT_EQ(back.vocab_size, 5);
  EXPECT_FLOAT_EQ(back.dropout, 0.25f);
  EXPECT_EQ(vocab_from_meta(meta), text.vocab);
  meta.extra.erase("gpt.n_head");
  EXPECT_THROW(gpt_config_from_meta(meta), std::runtime_error);
}

namespace {

// Every tensor of the reference dump, read into CPU tensors of the recorded dtype and shape.
struct Reference {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;
  int64_t num(const std::string& key) const { return std::stoll(meta.at(key)); }
  float real(const std::string& key) const { return std::stof(meta.at(key)); }
};

Reference read_reference() {
  const std::string path = std::string(TANDEM_TEST_DATA_DIR) + "/gpt_reference.safetensors";
  SafetensorsHeader header = read_safetensors_header(path);
  Reference r;
  r.meta = header.metadata;
  for (const SafetensorsEntry& e : header.tensors) r.tensors[e.name] = Tensor::empty(e.shape, e.dtype);
  read_safetensors_data(path, header, &r.tensors);
  return r;
}

}  // namespace

// llm.c's check: the same initialisation and batch as PyTorch (scripts/make-gpt-reference),
// then logits, loss, every gradient and 10 AdamW steps compared with PyTorch's numbers,
// with either attention kernel.
class GptReference : public ::testing::TestWithParam<AttentionKernel> {};

TEST_P(GptReference, MatchesPyTorch) {
  set_cpu_threads(1);
  const Reference ref = read_reference();
  GptConfig c{ref.num("vocab_size"), ref.num("n_layer"), ref.num("n_head"), ref.num("n_embd"), ref.num("context"), 0.f};
  c.attention = GetParam();
  GptModel m(c, 0);
  for (Parameter* p : m.parameters()) {
    auto it = ref.tensors.find("param." + p->name);
    ASSERT_NE(it, ref.tensors.end()) << "the reference has no " << p->name;
    ASSERT_EQ(it->second.shape(), p->value.shape()) << p->name;
    p->value.copy_from(it->second);
  }
  size_t ref_params = 0;
  for (const auto& [name, t] : ref.tensors) ref_params += name.rfind("param.", 0) == 0;
  EXPECT_EQ(ref_params, m.parameters().size()) << "the reference holds parameters this model lacks";

  const Tensor& inputs = ref.tensors.at("inputs");
  const int64_t rows = inputs.numel();
  Tensor labels = ref.tensors.at("targets").reshape({rows});
  SoftmaxCrossEntropy loss;
  m.zero_grad();
  Tensor logits = m.forward(inputs);
  EXPECT_LT(relative_error(logits.to_vector(), ref.tensors.at("logits").to_vector()), 1e-4);
  const double l = loss.forward(logits, labels);
  const double want = ref.tensors.at("loss").to_vector()[0];
  EXPECT_NEAR(l, want, 1e-4 * want);
  m.backward(loss.dlogits(1.f / static_cast<float>(rows)));
  for (Parameter* p : m.parameters()) {
    const double e = relative_error(p->grad.to_vector(), ref.tensors.at("grad." + p->name).to_vector());
    EXPECT_LT(e, 1e-3) << "gradient of " << p->name;
  }

  // 10 AdamW steps on the same batch: weight decay on matrices and embeddings only, clipping.
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.beta1 = ref.real("beta1");
  oc.beta2 = ref.real("beta2");
  oc.eps = ref.real("eps");
  oc.weight_decay = ref.real("weight_decay");
  oc.clip_grad_norm = ref.real("clip");
  SingleStrategy single(std::make_unique<GptModel>(c, 0), oc, Device::cpu());
  for (Parameter* p : single.model().parameters()) p->value.copy_from(ref.tensors.at("param." + p->name));
  Batch b;
  b.inputs = inputs;
  b.labels = labels;
  const std::vector<float> losses = ref.tensors.at("losses").to_vector();
  ASSERT_EQ(static_cast<int64_t>(losses.size()), ref.num("steps"));
  for (size_t s = 0; s < losses.size(); ++s) {
    PhaseTimes t;
    std::vector<Batch> batch{b};
    const double got = single.forward_backward(batch, t).loss();
    EXPECT_NEAR(got, losses[s], 1e-4 * losses[s]) << "loss before AdamW step " << s;
    single.step(ref.real("lr"), t);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GptReference,
                         ::testing::Values(AttentionKernel::materialized, AttentionKernel::tiled),
                         [](const auto& info) { return std::string(attention_kernel_name(info.param)); });
