// SoftmaxCrossEntropy: softmax over classes fused with the negative log-likelihood, as
// torch.nn.CrossEntropyLoss on (N, C) logits and (N) integer labels.
// Invariant: forward keeps the probabilities and labels, so backward(scale) needs no
// logits; the caller chooses the scale (1/N for a mean; DDP passes its own), which is
// why the loss is not a Module.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/kernels.h"
#include "runtime/tensor.h"

namespace tandem {

class SoftmaxCrossEntropy {
 public:
  // logits (N, C) f32, labels (N) i32 on the same device. Returns the mean loss over rows.
  double forward(const Tensor& logits, const Tensor& labels);
  // The same forward, returning the SUM of the rows' losses as a value read later (a
  // training step reads it once the step is queued: no host wait mid-step on a GPU).
  std::shared_ptr<Kernels::PendingValue> forward_later(const Tensor& logits, const Tensor& labels);
  // dlogits (N, C) = (probs - onehot(labels)) * scale, for the last forward (callable
  // more than once).
  Tensor backward(float scale);
  // Rows whose argmax (first maximum on ties) equals the label.
  static int64_t count_correct(const Tensor& logits, const Tensor& labels);

 private:
  bool saved_ = false;
  Tensor probs_;   // (N, C), owned here and reused across steps
  Tensor labels_;  // (N), the caller's labels
  Tensor losses_;  // (N) per-row scratch
  Tensor dlogits_cache_;
};

}  // namespace tandem
