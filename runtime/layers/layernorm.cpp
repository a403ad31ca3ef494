// LayerNorm forward/backward over the device kernels.
#include "runtime/layers/layernorm.h"

#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

LayerNorm::LayerNorm(int64_t features, float eps) : features_(features), eps_(eps) {
  if (features <= 0)
    throw std::invalid_argument("LayerNorm: features must be positive, got " + std::to_string(features));
  if (!(eps > 0.f)) throw std::invalid_argument("LayerNorm: eps must be positive");
  weight_ = &add_parameter("weight", {features_});
  bias_ = &add_parameter("bias", {features_});
  reset_parameters(0);  // ones and zeros do not depend on the seed
}

void LayerNorm::reset_parameters(uint64_t) {
  init_constant(*weight_, 1.f);
  init_constant(*bias_, 0.f);
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  if (x.ndim() < 1 || x.dim(-1) != features_)
    throw_shape_error(kind(), "input", "(..., " + std::to_string(features_) + ")", x.shape());
  const int64_t rows = x.numel() / features_;
  Tensor y = reuse_buffer(y_cache_, x.shape(), device_);
  reuse_buffer(mean_, {rows}, device_);
  reuse_buffer(rstd_, {rows}, device_);
  kernels_for(device_).layernorm_forward(y.f32(), mean_.f32(), rstd_.f32(), x.f32(),
                                         weight_->value.f32(), bias_->value.f32(), rows, features_,
                                         eps_);
  if (training_) x_ = x;
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy) {
  check_saved(kind(), x_.defined());
  check_tensor(kind(), "output gradient", dy, device_);
  if (dy.shape() != x_.shape())
    throw_shape_error(kind(), "output gradient", shape_str(x_.shape()), dy.shape());
  const int64_t rows = x_.numel() / features_;
  // The kernel produces dx together with dgamma/dbeta, so it is returned even when not needed;
  // a frozen gamma or beta (runtime/freeze.h) has its gradient added into a discarded scratch.
  Tensor dx = reuse_buffer(dx_cache_, x_.shape(), device_);
  Kernels& k = kernels_for(device_);
  float* dgamma = weight_->requires_grad ? grad_ptr(*weight_) : nullptr;
  float* dbeta = bias_->requires_grad ? grad_ptr(*bias_) : nullptr;
  if (!dgamma || !dbeta) {
    reuse_buffer(frozen_grad_, {2 * features_}, device_);
    k.fill(frozen_grad_.f32(), 2 * features_, 0.f);
    if (!dgamma) dgamma = frozen_grad_.f32();
    if (!dbeta) dbeta = frozen_grad_.f32() + features_;
  }
  k.layernorm_backward(dx.f32(), dgamma, dbeta, dy.f32(), x_.f32(), weight_->value.f32(), mean_.f32(), rstd_.f32(),
                       rows, features_);
  x_ = Tensor();
  return dx;
}

void LayerNorm::release_activations() {
  x_ = Tensor();
  mean_ = Tensor();
  rstd_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
  frozen_grad_ = Tensor();
}

}  // namespace tandem
