// Loss: the seam between a model's outputs and the gradient that starts its backward.
// A strategy calls forward(outputs, targets) on each micro-batch and then backward(scale),
// and the scale is the strategy's, never the loss's: 1/rows of the global batch, so that
// every mode's gradients are those of the mean loss over the global batch
// (runtime/strategy/strategy.h). That is why a loss returns the SUM of its row losses and
// the number of rows it summed: replicas' and micro-batches' losses combine weighted by
// rows (DataParallel's gathered batch, DDP's ranks, an uneven last batch) by adding sums
// and rows, which is exact whatever the split.
//
// A row is one sample's loss: one image, one token position of a language model, one
// regression target row. Its loss may read other rows (InfoNCE compares each row with
// every row of the global batch); it is still the row's share of the sum.
//
// Built in: SoftmaxCrossEntropy (here), MeanSquaredError and BceWithLogits
// (runtime/layers/regression_loss.h), InfoNce (runtime/layers/info_nce.h), and
// WeightedSum of several losses over several outputs (multi-task).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/runtime/kernels.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// One batch's loss: the sum of its row losses, read later (a step reads it once its work is
// queued, so a GPU is never stopped mid-step), and how many rows it sums.
struct LossSum {
  std::shared_ptr<Kernels::PendingValue> sum;
  int64_t rows = 0;
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;  // "softmax_cross_entropy", "mse", ...
  // `outputs` are the model's outputs (Model::forward_outputs), `targets` the batch's
  // (Batch::labels first, then Batch::extra_targets), all on one device. Keeps what
  // backward needs. Throws std::invalid_argument naming a shape, dtype or device that does
  // not fit.
  virtual LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) = 0;
  // The gradient of scale * (the last forward's sum) with respect to each output: one tensor
  // per output, undefined for an output this loss does not read. The tensors stay valid until
  // the next forward or backward (their buffers are reused across steps).
  virtual std::span<const Tensor> backward(float scale) = 0;
};

// Softmax over classes fused with the negative log-likelihood, as torch.nn.CrossEntropyLoss on
// (N, C) logits (output 0) and (N) i32 class indices (target 0). Forward keeps the
// probabilities, so backward needs no logits.
class SoftmaxCrossEntropy final : public Loss {
 public:
  std::string name() const override { return "softmax_cross_entropy"; }
  LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  std::span<const Tensor> backward(float scale) override;

  // The same on one tensor each: the mean loss over rows, read at once.
  double forward(const Tensor& logits, const Tensor& labels);
  // The same forward, returning the SUM of the rows' losses, read later.
  std::shared_ptr<Kernels::PendingValue> forward_later(const Tensor& logits, const Tensor& labels);
  // dlogits (N, C) = (probs - onehot(labels)) * scale, for the last forward (callable more than once).
  Tensor dlogits(float scale);
  // Rows whose argmax (first maximum on ties) equals the label.
  static int64_t count_correct(const Tensor& logits, const Tensor& labels);

 private:
  bool saved_ = false;
  Tensor probs_;   // (N, C), owned here and reused across steps
  Tensor labels_;  // (N), the caller's labels
  Tensor losses_;  // (N) per-row scratch
  Tensor dlogits_cache_;
  Tensor grads_[1];
};

// Several losses summed with weights: sum_k weight_k * loss_k, each term reading one output
// and one target (indices into forward's spans). Every term must count the same rows (one
// row per sample in each head), which is what makes the weighted row sums a row sum again.
// The gradient of an output read by several terms is their sum.
class WeightedSum final : public Loss {
 public:
  struct Term {
    std::unique_ptr<Loss> loss;
    float weight = 1.0f;
    size_t output = 0;
    size_t target = 0;
  };
  explicit WeightedSum(std::vector<Term> terms);
  std::string name() const override;
  LossSum forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) override;
  std::span<const Tensor> backward(float scale) override;

 private:
  std::vector<Term> terms_;
  size_t outputs_ = 0;
  std::vector<Tensor> grads_;  // one per output; outputs read by several terms own a buffer
  std::vector<Tensor> sums_;   // per output read by more than one term
  std::vector<int> readers_;   // terms reading each output
};

// The loss a strategy uses when none is given: SoftmaxCrossEntropy.
std::unique_ptr<Loss> default_loss();

}  // namespace tandem
