// The regression losses over the device kernels (mse_* and bce_logits_* of
// runtime/kernels.h), and their metrics.
#include "runtime/layers/regression_loss.h"

#include <stdexcept>
#include <string>

#include "runtime/allocator.h"
#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

enum class RegressionKind { mse, bce_with_logits };

// Output 0 and target 0: present, f32, one shape (N, ...) with at least one element per
// row, on one device. Returns the elements per row.
int64_t check_pred_target(const std::string& kind, std::span<const Tensor> outputs,
                          std::span<const Tensor> targets) {
  if (outputs.empty())
    throw std::invalid_argument(kind + ": reads output 0 but the model returned no outputs");
  if (targets.empty())
    throw std::invalid_argument(kind + ": reads target 0 but the batch holds no targets");
  const Tensor& pred = outputs[0];
  const Tensor& target = targets[0];
  check_tensor(kind, "output 0", pred, pred.device());
  if (pred.ndim() < 1) throw_shape_error(kind, "output 0", "(N, ...) with at least one dimension", pred.shape());
  const int64_t rows = pred.dim(0);
  const int64_t cols = rows == 0 ? 0 : pred.numel() / rows;
  if (rows > 0 && cols == 0)
    throw_shape_error(kind, "output 0", "(N, ...) with at least one element per row", pred.shape());
  check_tensor(kind, "target 0", target, target.device());
  if (target.shape() != pred.shape())
    throw_shape_error(kind, "target 0", shape_str(pred.shape()) + " to match output 0", target.shape());
  if (!(target.device() == pred.device()))
    throw std::invalid_argument(kind + ": target 0 is on " + target.device().str() + " but output 0 is on " +
                                pred.device().str());
  return cols;
}

LossSum regression_forward(RegressionKind which, const std::string& kind, RegressionLossState& s,
                           std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  s.saved = false;  // a failed forward leaves nothing for backward
  s.target = Tensor();
  const int64_t cols = check_pred_target(kind, outputs, targets);
  const Tensor& pred = outputs[0];
  const int64_t rows = pred.dim(0);
  const Device dev = pred.device();
  // Our own copy: holding the model's output would keep its buffer from being reused.
  reuse_buffer(s.pred, pred.shape(), dev);
  reuse_buffer(s.losses, {rows}, dev);
  Kernels& k = kernels_for(dev);
  if (rows > 0) {
    s.pred.copy_from(pred);
    if (which == RegressionKind::mse)
      k.mse_forward(s.losses.f32(), pred.f32(), targets[0].f32(), rows, cols);
    else
      k.bce_logits_forward(s.losses.f32(), pred.f32(), targets[0].f32(), rows, cols);
  }
  s.target = targets[0];
  s.saved = true;
  return {k.sum_later(s.losses.f32(), rows), rows};
}

std::span<const Tensor> regression_backward(RegressionKind which, const std::string& kind, RegressionLossState& s,
                                            float scale) {
  if (!s.saved) throw std::logic_error(kind + ": backward called without a successful forward");
  const Tensor& pred = s.pred;
  const int64_t rows = pred.dim(0);
  const int64_t cols = rows == 0 ? 0 : pred.numel() / rows;
  s.grads[0] = Tensor();  // the last step's handle, which would keep the cache from reuse
  Tensor grad = reuse_buffer(s.grad_cache, pred.shape(), pred.device());
  Kernels& k = kernels_for(pred.device());
  if (rows > 0) {
    if (which == RegressionKind::mse)
      k.mse_backward(grad.f32(), pred.f32(), s.target.f32(), rows, cols, scale);
    else
      k.bce_logits_backward(grad.f32(), pred.f32(), s.target.f32(), rows, cols, scale);
  }
  s.grads[0] = grad;
  return s.grads;
}

}  // namespace

LossSum MeanSquaredError::forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  return regression_forward(RegressionKind::mse, "MeanSquaredError", state_, outputs, targets);
}

std::span<const Tensor> MeanSquaredError::backward(float scale) {
  return regression_backward(RegressionKind::mse, "MeanSquaredError", state_, scale);
}

LossSum BceWithLogits::forward(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  return regression_forward(RegressionKind::bce_with_logits, "BceWithLogits", state_, outputs, targets);
}

std::span<const Tensor> BceWithLogits::backward(float scale) {
  return regression_backward(RegressionKind::bce_with_logits, "BceWithLogits", state_, scale);
}

void MeanSquaredErrorMetric::add(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  const int64_t cols = check_pred_target("MeanSquaredErrorMetric", outputs, targets);
  const Tensor& pred = outputs[0];
  const int64_t rows = pred.dim(0);
  if (rows == 0) return;
  reuse_buffer(losses_, {rows}, pred.device());
  Kernels& k = kernels_for(pred.device());
  k.mse_forward(losses_.f32(), pred.f32(), targets[0].f32(), rows, cols);
  sum_sq_ += k.sum(losses_.f32(), rows) * static_cast<double>(cols);
  elements_ += pred.numel();
}

void BinaryAccuracy::add(std::span<const Tensor> outputs, std::span<const Tensor> targets) {
  check_pred_target("BinaryAccuracy", outputs, targets);
  const Tensor& logit = outputs[0];
  const Tensor& target = targets[0];
  const int64_t n = logit.numel();
  if (n == 0) return;
  const float* x = logit.f32();
  const float* t = target.f32();
  if (logit.device().is_cuda()) {
    // resize() allocates only when a batch outgrows every earlier one.
    logits_.resize(static_cast<size_t>(n));
    targets_.resize(static_cast<size_t>(n));
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    device_copy(logits_.data(), Device::cpu(), x, logit.device(), bytes);
    device_copy(targets_.data(), Device::cpu(), t, target.device(), bytes);
    x = logits_.data();
    t = targets_.data();
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += (x[i] > 0.f) == (t[i] > 0.5f);
  correct_ += correct;
  elements_ += n;
}

}  // namespace tandem
