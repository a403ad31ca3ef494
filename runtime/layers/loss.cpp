// The loss seam's built-ins: softmax cross-entropy over the device kernels, and the
// weighted sum of several losses (multi-task).
#include "runtime/layers/loss.h"

#include <stdexcept>
#include <string>
#include <algorithm>
#include <utility>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

void check_logits_labels(const char* what, const Tensor& logits, const Tensor& labels) {
  const std::string kind = std::string("SoftmaxCrossEntropy::") + what;
  check_tensor(kind, "logits", logits, logits.device());
  if (logits.ndim() != 2 || logits.dim(1) < 1)
    throw_shape_error(kind, "logits", "(N, C) with C >= 1", logits.shape());
  if (!labels.defined() || labels.dtype() != DType::i32)
    throw std::invalid_argument(
        kind + ": labels must be an i32 tensor" +
        (labels.defined() ? std::string(", got ") + dtype_name(labels.dtype()) : ""));
  if (labels.ndim() != 1 || labels.dim(0) != logits.dim(0))
    throw_shape_error(
        kind, "labels",
        "(" + std::to_string(logits.dim(0)) + ") to match logits " + shape_str(logits.shape()),
        labels.shape());
  if (!(labels.device() == logits.device()))
    throw std::invalid_argument(kind + ": labels on " + labels.device().str() + " but logits on " +
                                logits.device().str());
}

// The output and target a single-tensor loss reads, checked to exist.
void check_arity(const std::string& loss, std::span<const Tensor> outputs, std::span<const Tensor> targets,
                 size_t output, size_t target) {
  if (outputs.size() <= output)
    throw std::invalid_argument(loss + ": reads output " + std::to_string(output) + " but the model returned " +
                                std::to_string(outputs.size()));
  if (targets.size() <= target)
    throw std::invalid_argument(loss + ": reads target " + std::to_string(target) + " but the batch holds " +
                                std::to_string(targets.size()));
}

}  // namespace

LossSum SoftmaxCrossEntropy::forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  check_arity("SoftmaxCrossEntropy", outputs, targets, 0, 0);
  return {forward_later(outputs[0], targets[0]), outputs[0].defined() ? outputs[0].dim(0) : 0};
}

std::span<const Tensor> SoftmaxCrossEntropy::backward(float scale) {
  grads_[0] = Tensor();  // last step's handle off the buffer, so dlogits reuses it
  grads_[0] = dlogits(scale);
  return grads_;
}

double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  std::shared_ptr<Kernels::PendingValue> sum = forward_later(logits, labels);
  const int64_t rows = logits.dim(0);
  return rows == 0 ? 0.0 : sum->get() / static_cast<double>(rows);
}

std::shared_ptr<Kernels::PendingValue> SoftmaxCrossEntropy::forward_later(const Tensor& logits,
                                                                          const Tensor& labels) {
  check_logits_labels("forward", logits, labels);
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  const Device dev = logits.device();
  saved_ = false;
  reuse_buffer(probs_, logits.shape(), dev);
  reuse_buffer(losses_, {rows}, dev);
  Kernels& k = kernels_for(dev);
  // The CPU kernel rejects a label outside [0, C) naming the row that holds it.
  k.softmax_xent_forward(probs_.f32(), losses_.f32(), logits.f32(), labels.data<int32_t>(), rows,
                         classes);
  labels_ = labels;
  saved_ = true;
  return k.sum_later(losses_.f32(), rows);
}

Tensor SoftmaxCrossEntropy::dlogits(float scale) {
  if (!saved_)
    throw std::logic_error("SoftmaxCrossEntropy: backward called without a successful forward");
  Tensor dlogits = reuse_buffer(dlogits_cache_, probs_.shape(), probs_.device());
  kernels_for(probs_.device())
      .softmax_xent_backward(dlogits.f32(), probs_.f32(), labels_.data<int32_t>(), probs_.dim(0),
                             probs_.dim(1), scale);
  return dlogits;
}

int64_t SoftmaxCrossEntropy::count_correct(const Tensor& logits, const Tensor& labels) {
  check_logits_labels("count_correct", logits, labels);
  return kernels_for(logits.device())
      .count_correct(logits.f32(), labels.data<int32_t>(), logits.dim(0), logits.dim(1));
}

WeightedSum::WeightedSum(std::vector<Term> terms) : terms_(std::move(terms)) {
  if (terms_.empty()) throw std::invalid_argument("WeightedSum: no terms");
  for (const Term& t : terms_) {
    if (!t.loss) throw std::invalid_argument("WeightedSum: a term without a loss");
    outputs_ = std::max(outputs_, t.output + 1);
  }
  grads_.resize(outputs_);
  sums_.resize(outputs_);
  readers_.assign(outputs_, 0);
  for (const Term& t : terms_) ++readers_[t.output];
}

std::string WeightedSum::name() const {
  std::string out = "weighted_sum(";
  for (size_t i = 0; i < terms_.size(); ++i)
    out += (i ? ", " : "") + std::to_string(terms_[i].weight) + " * " + terms_[i].loss->name();
  return out + ")";
}

namespace {
// The weighted sum of the terms' pending sums, read when the step's loss is read.
struct WeightedPending final : Kernels::PendingValue {
  std::vector<std::pair<std::shared_ptr<Kernels::PendingValue>, double>> parts;
  double get() override {
    double total = 0;
    for (auto& [value, weight] : parts) total += weight * value->get();
    return total;
  }
};
}  // namespace

LossSum WeightedSum::forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  auto pending = std::make_shared<WeightedPending>();
  int64_t rows = -1;
  for (Term& t : terms_) {
    if (t.output >= outputs.size())
      throw std::invalid_argument("WeightedSum: term " + t.loss->name() + " reads output " + std::to_string(t.output) +
                                  " but the model returned " + std::to_string(outputs.size()));
    if (t.target >= targets.size())
      throw std::invalid_argument("WeightedSum: term " + t.loss->name() + " reads target " + std::to_string(t.target) +
                                  " but the batch holds " + std::to_string(targets.size()));
    LossSum s = t.loss->forward(outputs.subspan(t.output, 1), targets.subspan(t.target, 1));
    if (rows >= 0 && s.rows != rows)
      throw std::invalid_argument("WeightedSum: term " + t.loss->name() + " counts " + std::to_string(s.rows) +
                                  " rows but an earlier term counts " + std::to_string(rows) +
                                  " (every head must give one row per sample)");
    rows = s.rows;
    pending->parts.emplace_back(std::move(s.sum), static_cast<double>(t.weight));
  }
  return {std::move(pending), rows};
}

std::span<const Tensor> WeightedSum::backward(float scale) {
  for (Tensor& g : grads_) g = Tensor();
  for (Term& t : terms_) {
    const Tensor& g = t.loss->backward(scale * t.weight)[0];
    if (readers_[t.output] == 1) {
      grads_[t.output] = g;  // the term's own buffer: no copy
      continue;
    }
    Tensor& acc = grads_[t.output];
    if (!acc.defined()) {
      acc = reuse_buffer(sums_[t.output], g.shape(), g.device());
      acc.copy_from(g);
    } else {
      kernels_for(g.device()).axpy(acc.f32(), g.f32(), g.numel(), 1.0f);
    }
  }
  return grads_;
}

std::unique_ptr<Loss> default_loss() { return std::make_unique<SoftmaxCrossEntropy>(); }

}  // namespace tandem
