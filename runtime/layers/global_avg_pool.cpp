// GlobalAvgPool forward/backward over the device kernels, a plane being one "channel" of
// sum_channels_acc / add_bias_channels over (1, N*C, H*W).
#include "runtime/layers/global_avg_pool.h"

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Tensor GlobalAvgPool::forward(const Tensor& x) {
  // A parameterless layer follows its input's device, as ReLU does.
  check_tensor(kind(), "input", x, x.device());
  if (x.ndim() != 4 || x.dim(2) == 0 || x.dim(3) == 0)
    throw_shape_error(kind(), "input", "(N, C, H, W) with H, W >= 1", x.shape());
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  const Device dev = x.device();
  Kernels& k = kernels_for(dev);
  Tensor y = reuse_buffer(y_cache_, {n, c}, dev);
  k.fill(y.f32(), y.numel(), 0.f);  // sum_channels_acc adds
  k.sum_channels_acc(y.f32(), x.f32(), 1, n * c, hw);
  k.scale(y.f32(), y.numel(), 1.0f / static_cast<float>(hw));
  saved_ = training();
  x_shape_ = x.shape();
  device_of_x_ = dev;
  return y;
}

Tensor GlobalAvgPool::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  saved_ = false;
  if (!needs_input_grad_) return Tensor();
  const Shape y_shape{x_shape_[0], x_shape_[1]};
  check_tensor(kind(), "output gradient", dy, device_of_x_);
  if (dy.shape() != y_shape) throw_shape_error(kind(), "output gradient", shape_str(y_shape), dy.shape());
  const int64_t planes = x_shape_[0] * x_shape_[1], hw = x_shape_[2] * x_shape_[3];
  Kernels& k = kernels_for(device_of_x_);
  Tensor scaled = reuse_buffer(dy_scaled_, y_shape, device_of_x_);
  k.copy(scaled.f32(), dy.f32(), planes);
  k.scale(scaled.f32(), planes, 1.0f / static_cast<float>(hw));
  Tensor dx = reuse_buffer(dx_cache_, x_shape_, device_of_x_);
  k.fill(dx.f32(), dx.numel(), 0.f);  // add_bias_channels adds
  k.add_bias_channels(dx.f32(), scaled.f32(), 1, planes, hw);
  return dx;
}

void GlobalAvgPool::release_activations() {
  saved_ = false;
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
  dy_scaled_ = Tensor();
  Module::release_activations();
}

}  // namespace tandem
