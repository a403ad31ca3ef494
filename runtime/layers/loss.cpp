// Softmax cross-entropy forward/backward and accuracy counting over the device kernels.
#include "runtime/layers/loss.h"

#include <stdexcept>
#include <string>

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

}  // namespace

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

Tensor SoftmaxCrossEntropy::backward(float scale) {
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

}  // namespace tandem
