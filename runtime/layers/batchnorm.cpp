// BatchNorm forward/backward over the device kernels: statistics as sums (one (2C + 1)
// tensor forward, one (2C) backward), summed over the replicas when synced, then the
// moments, the running statistics and the normalisation on the device.
#include "runtime/layers/batchnorm.h"

#include <cmath>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

// An f32 buffer's values, an i64 one's pointer: checked, since a loaded state dict may
// have replaced the tensors.
float* f32_buffer(ModuleBuffer& b, const std::string& kind) {
  if (b.value.dtype() != DType::f32)
    throw std::logic_error(kind + ": buffer " + b.name + " must be f32, got " + dtype_name(b.value.dtype()));
  return b.value.f32();
}

int64_t* i64_buffer(ModuleBuffer& b, const std::string& kind) {
  if (b.value.dtype() != DType::i64 || b.value.numel() != 1)
    throw std::logic_error(kind + ": buffer " + b.name + " must be one i64, got " + dtype_name(b.value.dtype()) +
                           " " + shape_str(b.value.shape()));
  return b.value.data<int64_t>();
}

}  // namespace

BatchNorm::BatchNorm(BatchNormKind kind, int64_t channels, BatchNormOptions options)
    : kind_(kind), channels_(channels), options_(options) {
  if (channels <= 0)
    throw std::invalid_argument(this->kind() + ": channels must be positive, got " + std::to_string(channels));
  if (!(options.eps >= 0.f) || !std::isfinite(options.eps))
    throw std::invalid_argument(this->kind() + ": eps must be finite and non-negative, got " +
                                std::to_string(options.eps));
  if (!std::isfinite(options.momentum))
    throw std::invalid_argument(this->kind() + ": momentum must be finite, got " + std::to_string(options.momentum));
  if (options_.affine) {
    weight_ = &add_parameter("weight", {channels_});
    bias_ = &add_parameter("bias", {channels_});
  }
  running_mean_ = &add_buffer("running_mean", {channels_});
  running_var_ = &add_buffer("running_var", {channels_});
  num_batches_tracked_ = &add_buffer("num_batches_tracked", {}, DType::i64);
  reset_parameters(0);  // constants: the seed is unused, as in PyTorch
}

std::string BatchNorm::kind() const { return kind_ == BatchNormKind::d1 ? "BatchNorm1d" : "BatchNorm2d"; }

void BatchNorm::reset_parameters(uint64_t) {
  if (weight_) init_constant(*weight_, 1.f);
  if (bias_) init_constant(*bias_, 0.f);
  running_mean_->value.copy_from(Tensor::from_vector(std::vector<float>(static_cast<size_t>(channels_), 0.f),
                                                     {channels_}));
  running_var_->value.copy_from(Tensor::from_vector(std::vector<float>(static_cast<size_t>(channels_), 1.f),
                                                    {channels_}));
  num_batches_tracked_->value.copy_from(Tensor::zeros({}, DType::i64));
}

std::string BatchNorm::sum_name(const char* what) const {
  // The buffers carry the layer's dotted prefix ("layer1.0.bn1.running_mean").
  const std::string& full = running_mean_->name;
  const std::string local = "running_mean";
  std::string prefix = full.size() > local.size() ? full.substr(0, full.size() - local.size() - 1) : "";
  return kind() + (prefix.empty() ? "" : " " + prefix) + " " + what;
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  const std::string c = std::to_string(channels_);
  const std::string expected =
      kind_ == BatchNormKind::d2 ? "(N, " + c + ", H, W)" : "(N, " + c + ") or (N, " + c + ", L)";
  const bool rank_ok = kind_ == BatchNormKind::d2 ? x.ndim() == 4 : x.ndim() == 2 || x.ndim() == 3;
  if (!rank_ok || x.dim(1) != channels_) throw_shape_error(kind(), "input", expected, x.shape());
  if (x.numel() == 0) throw_shape_error(kind(), "input", expected + " with no empty dimension", x.shape());
  const int64_t n = x.dim(0), s = x.numel() / (n * channels_);

  Kernels& k = kernels_for(device_);
  const float* w = weight_ ? weight_->value.f32() : nullptr;
  const float* b = bias_ ? bias_->value.f32() : nullptr;
  Tensor y = reuse_buffer(y_cache_, x.shape(), device_);
  reuse_buffer(invstd_, {channels_}, device_);
  if (!training_) {  // evaluation keeps nothing for a backward
    const float* running_mean = f32_buffer(*running_mean_, kind());
    k.batchnorm_eval_invstd(invstd_.f32(), f32_buffer(*running_var_, kind()), channels_, options_.eps);
    k.batchnorm_forward(y.f32(), x.f32(), running_mean, invstd_.f32(), w, b, n, channels_, s);
    x_ = Tensor();
    return y;
  }
  // PyTorch's check (torch.nn.functional._verify_batch_size); SyncBatchNorm counts the
  // replicas' values too, as its own check does.
  if (n * s * (sync_ ? sync_->replicas() : 1) <= 1)
    throw std::invalid_argument(kind() + ": Expected more than 1 value per channel when training, got input size " +
                                shape_str(x.shape()));
  reuse_buffer(stats_, {2 * channels_ + 1}, device_);
  k.batchnorm_stats(stats_.f32(), x.f32(), n, channels_, s);
  if (sync_) sync_->sum(stats_, sum_name("forward statistics"));
  reuse_buffer(mean_, {channels_}, device_);
  k.batchnorm_train_moments(mean_.f32(), invstd_.f32(), f32_buffer(*running_mean_, kind()),
                            f32_buffer(*running_var_, kind()), i64_buffer(*num_batches_tracked_, kind()),
                            stats_.f32(), channels_, options_.eps, options_.momentum);
  k.batchnorm_forward(y.f32(), x.f32(), mean_.f32(), invstd_.f32(), w, b, n, channels_, s);
  x_ = x;
  return y;
}

Tensor BatchNorm::backward(const Tensor& dy) {
  check_saved(kind(), x_.defined());
  // A frozen weight or bias (runtime/freeze.h) gets no gradient; without dx either,
  // nothing is computed (and a layer whose input nobody differentiates may get no dy).
  const bool dweight = weight_ && weight_->requires_grad, dbias = bias_ && bias_->requires_grad;
  if (!needs_input_grad_ && !dweight && !dbias) {
    x_ = Tensor();
    return Tensor();
  }
  check_tensor(kind(), "output gradient", dy, device_);
  if (dy.shape() != x_.shape()) throw_shape_error(kind(), "output gradient", shape_str(x_.shape()), dy.shape());
  const int64_t n = x_.dim(0), s = x_.numel() / (n * channels_);

  Kernels& k = kernels_for(device_);
  reuse_buffer(sums_, {2 * channels_}, device_);
  k.batchnorm_backward_sums(sums_.f32(), dy.f32(), x_.f32(), mean_.f32(), invstd_.f32(), n, channels_, s);
  // This replica's own sums, before the cross-replica sum replaces them.
  if (dweight) k.axpy(grad_ptr(*weight_), sums_.f32() + channels_, channels_, 1.f);
  if (dbias) k.axpy(grad_ptr(*bias_), sums_.f32(), channels_, 1.f);
  Tensor dx;
  if (needs_input_grad_) {
    if (sync_) sync_->sum(sums_, sum_name("backward gradient sums"));
    dx = reuse_buffer(dx_cache_, x_.shape(), device_);
    // M, the (global) count, is forward's stats_[2C], read on the device.
    k.batchnorm_backward_dx(dx.f32(), dy.f32(), x_.f32(), mean_.f32(), invstd_.f32(),
                            weight_ ? weight_->value.f32() : nullptr, sums_.f32(), stats_.f32() + 2 * channels_, n,
                            channels_, s);
  }
  x_ = Tensor();
  return dx;
}

void BatchNorm::release_activations() {
  x_ = Tensor();
  mean_ = invstd_ = stats_ = sums_ = Tensor();
  y_cache_ = dx_cache_ = Tensor();
  Module::release_activations();
}

}  // namespace tandem
