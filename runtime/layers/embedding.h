// Embeddings for a language model: Embedding looks token ids up in a table (as
// torch.nn.Embedding), PositionEmbedding adds a learned vector per position (GPT-2's wpe).
// Invariant: Embedding's input is data (i32 ids), so its backward only accumulates the
// table's gradient (deterministically: runtime/kernels.h) and returns no input gradient;
// PositionEmbedding passes the gradient through unchanged and adds its sum over the batch
// into the first T rows of its table.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class Embedding final : public Module {
 public:
  Embedding(int64_t vocab_size, int64_t dim);
  std::string kind() const override { return "Embedding"; }
  // ids (...) i32, each in [0, vocab_size) -> (..., dim) f32.
  Tensor forward(const Tensor& ids) override;
  // Accumulates the table gradient; returns an undefined tensor (ids have no gradient).
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;
  // weight ~ N(0, 1), torch.nn.Embedding's default.
  void reset_parameters(uint64_t seed) override;

  int64_t vocab_size() const { return vocab_; }
  int64_t dim() const { return dim_; }
  // The table (vocab, dim): a tied LM head reads and accumulates into it.
  Parameter& weight() { return *weight_; }

 private:
  int64_t vocab_, dim_;
  Parameter* weight_;  // (vocab, dim)
  Tensor ids_;         // saved ids (on the layer's device)
  Tensor y_cache_;
};

class PositionEmbedding final : public Module {
 public:
  PositionEmbedding(int64_t max_positions, int64_t dim);
  std::string kind() const override { return "PositionEmbedding"; }
  // x (B, T, dim) with T <= max_positions -> x + weight[0..T) broadcast over B.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;
  // weight ~ N(0, 1), as an nn.Embedding.
  void reset_parameters(uint64_t seed) override;

 private:
  int64_t max_positions_, dim_;
  Parameter* weight_;  // (max_positions, dim)
  Shape x_shape_;      // saved by forward; empty when nothing is saved
  Tensor y_cache_;
};

}  // namespace tandem
