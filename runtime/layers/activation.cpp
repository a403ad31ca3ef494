// ReLU and GELU forward/backward over the device kernels.
#include "runtime/layers/activation.h"

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

// Parameterless layers follow their input's device rather than device_, so they work
// before (or without) Module::to.
void check_dy(const std::string& kind, const Tensor& dy, const Tensor& saved) {
  check_tensor(kind, "output gradient", dy, saved.device());
  if (dy.shape() != saved.shape())
    throw_shape_error(kind, "output gradient", shape_str(saved.shape()), dy.shape());
}

}  // namespace

Tensor ReLU::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, x.device());
  y_ = Tensor();  // drop a forward's output never consumed by backward (eval), so the cache is reusable
  Tensor y = reuse_buffer(y_cache_, x.shape(), x.device());
  kernels_for(x.device()).relu_forward(y.f32(), x.f32(), x.numel());
  if (training_) y_ = y;
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  check_saved(kind(), y_.defined());
  Tensor dx;
  if (needs_input_grad_) {
    check_dy(kind(), dy, y_);
    dx = reuse_buffer(dx_cache_, y_.shape(), y_.device());
    kernels_for(y_.device()).relu_backward(dx.f32(), dy.f32(), y_.f32(), y_.numel());
  }
  y_ = Tensor();
  return dx;
}

Tensor GELU::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, x.device());
  Tensor y = reuse_buffer(y_cache_, x.shape(), x.device());
  Kernels& k = kernels_for(x.device());
  if (approximation_ == GeluApproximation::tanh)
    k.gelu_tanh_forward(y.f32(), x.f32(), x.numel());
  else
    k.gelu_forward(y.f32(), x.f32(), x.numel());
  if (training_) x_ = x;
  return y;
}

Tensor GELU::backward(const Tensor& dy) {
  check_saved(kind(), x_.defined());
  Tensor dx;
  if (needs_input_grad_) {
    check_dy(kind(), dy, x_);
    dx = reuse_buffer(dx_cache_, x_.shape(), x_.device());
    Kernels& k = kernels_for(x_.device());
    if (approximation_ == GeluApproximation::tanh)
      k.gelu_tanh_backward(dx.f32(), dy.f32(), x_.f32(), x_.numel());
    else
      k.gelu_backward(dx.f32(), dy.f32(), x_.f32(), x_.numel());
  }
  x_ = Tensor();
  return dx;
}

void ReLU::release_activations() {
  y_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
}

void GELU::release_activations() {
  x_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
}

}  // namespace tandem
