// The GPT model of the zoo (--model gpt): GPT-2's architecture at any size, character
// level. Layers, as the container lists them (parameter names in brackets):
//   wte   Embedding (V, C)                  [wte.weight]       ids (B, T) -> (B, T, C)
//   wpe   PositionEmbedding (context, C)    [wpe.weight]       + position vectors
//   drop  Dropout (only when dropout > 0)
//   blocks.i  TransformerBlock, i < n_layer [blocks.i.ln1.*, .attn.qkv.*, .attn.proj.*,
//                                            .ln2.*, .mlp.fc.*, .mlp.proj.*]
//   ln_f  LayerNorm (C)                     [ln_f.weight, ln_f.bias]
//   lm_head  TiedLinear over wte.weight     (no parameter)      -> logits (B*T, V)
// The names match a PyTorch module of the same shape (scripts/bench/gpt_torch.py), so a
// checkpoint loads there without renaming.
// Invariant: wte.weight is one parameter used twice; the lm_head adds its gradient
// first, the embedding last, and only then is it reported ready (runtime/module.h).
#pragma once

#include <cstdint>
#include <memory>

#include "tandem/runtime/layers/attention.h"
#include "tandem/runtime/model.h"

namespace tandem {

struct GptConfig {
  int64_t vocab_size = 0;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t context = 64;  // longest sequence (rows of wpe)
  float dropout = 0.f;
  // Recompute each block's activations in backward instead of keeping them
  // (runtime/layers/activation_checkpoint.h): the blocks are wrapped, names unchanged.
  bool activation_checkpointing = false;
  // How each block's attention runs (runtime/layers/attention.h): the parameters, their
  // names and a checkpoint are the same either way.
  AttentionKernel attention = AttentionKernel::materialized;
};

// Throws std::invalid_argument naming the flag at fault (--n-embd not divisible by
// --n-head, --context of 0, ...).
void check_gpt_config(const GptConfig& config);

class GptModel final : public Model {
 public:
  // Builds and initialises (reset_parameters(seed)) the model.
  GptModel(const GptConfig& config, uint64_t seed);
  const GptConfig& config() const { return config_; }
  // GPT-2's initialisation: matrices and embeddings ~ N(0, 0.02), the two residual
  // projections of each block (attn.proj.weight, mlp.proj.weight) ~ N(0, 0.02 /
  // sqrt(2 n_layer)), biases 0, LayerNorm weights 1. Each draw depends on (seed, name).
  void reset_parameters(uint64_t seed) override;

 private:
  GptConfig config_;
};

}  // namespace tandem
