// GPT model construction and GPT-2 initialisation.
#include "zoo/gpt.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/layers/activation_checkpoint.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_util.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/tied_linear.h"
#include "runtime/layers/transformer_block.h"

namespace tandem {

void check_gpt_config(const GptConfig& c) {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) throw std::invalid_argument(std::string(flag) + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab_size, "the vocabulary size");
  positive(c.n_layer, "--n-layer");
  positive(c.n_head, "--n-head");
  positive(c.n_embd, "--n-embd");
  positive(c.context, "--context");
  if (c.n_embd % c.n_head != 0)
    throw std::invalid_argument("--n-embd (" + std::to_string(c.n_embd) + ") must be divisible by --n-head (" +
                                std::to_string(c.n_head) + ")");
  if (!(c.dropout >= 0.f && c.dropout < 1.f))
    throw std::invalid_argument("--dropout must be in [0, 1), got " + std::to_string(c.dropout));
}

GptModel::GptModel(const GptConfig& config, uint64_t seed) : config_(config) {
  check_gpt_config(config);
  const GptConfig& c = config_;
  auto wte = std::make_unique<Embedding>(c.vocab_size, c.n_embd);
  Parameter& tied = wte->weight();
  add("wte", std::move(wte));
  add("wpe", std::make_unique<PositionEmbedding>(c.context, c.n_embd));
  // Dropout seeds: one stream per dropout layer, all derived from the run's seed.
  if (c.dropout > 0.f) add("drop", std::make_unique<Dropout>(c.dropout, seed * 1000003 + 1));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    std::unique_ptr<Module> block =
        std::make_unique<TransformerBlock>(c.n_embd, c.n_head, c.dropout, seed * 1000003 + 16 * (i + 1),
                                           c.attention);
    // A transparent wrapper: "blocks.i.attn.qkv.weight" and the Dropout counters keep their names.
    if (c.activation_checkpointing) block = std::make_unique<ActivationCheckpoint>(std::move(block));
    add("blocks." + std::to_string(i), std::move(block));
  }
  add("ln_f", std::make_unique<LayerNorm>(c.n_embd));
  add("lm_head", std::make_unique<TiedLinear>(tied));
  reset_parameters(seed);
}

void GptModel::reset_parameters(uint64_t seed) {
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.f * static_cast<float>(config_.n_layer));
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (Parameter* p : parameters()) {
    if (p->value.ndim() >= 2) {
      const bool residual = ends_with(p->name, ".attn.proj.weight") || ends_with(p->name, ".mlp.proj.weight");
      init_normal(*p, seed, residual ? residual_std : std);
    } else {
      // LayerNorm weights are the only 1-D parameters that start at one.
      const bool ln_weight = ends_with(p->name, ".weight");
      init_constant(*p, ln_weight ? 1.f : 0.f);
    }
  }
}

}  // namespace tandem
