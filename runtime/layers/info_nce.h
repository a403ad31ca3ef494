// InfoNCE: a contrastive loss over the GLOBAL batch (runtime/layers/loss.h's seam), as in
// MoCo/SimCLR with in-batch negatives and CLIP's symmetric form.
//   outputs 0 and 1: two views' embeddings q and k, (N, D) f32 each, this rank's rows
//   targets: none read (any given are ignored)
// Every rank's k (and q, symmetric) is all-gathered in rank order into K (R*N, D), with
// AllGatherRows (runtime/layers/gather.h); row i of rank r is global row g = r*N + i, and
//   loss_i = -log softmax_j(q_i . K_j / temperature)[g]              (q -> k)
// or, symmetric, the mean of that and the same with k_i against Q (k -> q). Each rank
// returns the sum over its N rows and rows = N, so the strategies' 1/rows scaling and
// DDP's gradient average give the gradient of the mean over the global batch. The
// gradient with respect to K goes back through the all-gather's backward (reduce-scatter,
// sum), which is what hands this rank's k its gradient from every rank's rows.
// The embeddings are used as given (no L2 normalisation): a model that wants cosine
// similarities normalises its outputs itself. With a null group (single, dp, evaluation in
// ddp) the batch it sees is the global batch.
// Invariant: built from runtime/kernels.h only (gemm, softmax_xent_*, scale, axpy), so it
// runs on any device without host reads but the pending sum; forward copies q and k into
// buffers of its own, leaving the model's output buffers free for its next forward.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/layers/gather.h"

namespace tandem {

struct InfoNceOptions {
  float temperature = 0.1f;  // > 0; the logits are q . k / temperature
  bool symmetric = false;    // CLIP: the mean of the q -> k and k -> q losses
};

class InfoNce final : public Loss {
 public:
  // group: the ranks whose rows are the negatives (LossContext::group); null: this batch alone.
  explicit InfoNce(std::shared_ptr<ProcessGroup> group = nullptr, InfoNceOptions options = {});

  std::string name() const override { return "info_nce"; }
  LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  // {dq, dk}, each (N, D).
  std::span<const Tensor> backward(float scale) override;

  const InfoNceOptions& options() const { return options_; }

 private:
  // One direction a -> b: logits (N, R*N) = a . B^T / t, softmax cross-entropy against the
  // global indices of a's rows.
  struct Direction {
    Tensor probs;   // (N, R*N)
    Tensor losses;  // (N)
    Tensor dlogits;  // (N, R*N)
    Tensor dall;    // (R*N, D): gradient with respect to the gathered B
  };
  void forward_direction(Direction& d, const Tensor& a, const Tensor& b_all);
  // da += (or =, when !accumulate) dlogits . B / t; returns dB = dlogits^T . a / t.
  Tensor backward_direction(Direction& d, const Tensor& a, const Tensor& b_all, float scale, Tensor& da,
                            bool accumulate);

  InfoNceOptions options_;
  AllGatherRows gather_q_, gather_k_;
  bool saved_ = false;
  Tensor q_, k_;          // (N, D) copies of outputs 0 and 1
  Tensor q_all_, k_all_;  // (R*N, D) gathered (q_all_ only when symmetric)
  Tensor labels_;         // (N) i32: rank*N + i, on the outputs' device
  int64_t labels_first_ = -1;
  Direction qk_, kq_;
  Tensor losses_;         // (N) symmetric: the mean of both directions' losses
  Tensor dq_, dk_;        // (N, D)
  Tensor grads_[2];
};

}  // namespace tandem
