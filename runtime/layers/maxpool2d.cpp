// MaxPool2d forward/backward over the device kernels.
#include "runtime/layers/maxpool2d.h"

#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride)
    : k_(kernel_size), stride_(stride == 0 ? kernel_size : stride) {
  if (k_ <= 0 || stride_ <= 0)
    throw std::invalid_argument("MaxPool2d: kernel_size and stride must be positive, got " +
                                std::to_string(kernel_size) + " and " + std::to_string(stride));
}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, x.device());
  if (x.ndim() != 4 || x.dim(2) < k_ || x.dim(3) < k_)
    throw_shape_error(kind(), "input", "(N, C, H, W) with H, W >= " + std::to_string(k_), x.shape());
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = (h - k_) / stride_ + 1, ow = (w - k_) / stride_ + 1;
  const Device dev = x.device();
  saved_ = false;
  Tensor y = reuse_buffer(y_cache_, {n, c, oh, ow}, dev);
  reuse_buffer(argmax_, {n, c, oh, ow}, dev, DType::i32);
  kernels_for(dev).maxpool_forward(y.f32(), argmax_.data<int32_t>(), x.f32(), n * c, h, w, k_, stride_,
                                   oh, ow);
  saved_ = true;
  x_shape_ = x.shape();
  return y;
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  saved_ = false;
  if (!needs_input_grad_) return Tensor();
  check_tensor(kind(), "output gradient", dy, argmax_.device());
  if (dy.shape() != argmax_.shape())
    throw_shape_error(kind(), "output gradient", shape_str(argmax_.shape()), dy.shape());
  Tensor dx = reuse_buffer(dx_cache_, x_shape_, argmax_.device());
  kernels_for(dx.device())
      .maxpool_backward(dx.f32(), dy.f32(), argmax_.data<int32_t>(), x_shape_[0] * x_shape_[1],
                        x_shape_[2], x_shape_[3], argmax_.dim(2), argmax_.dim(3));
  return dx;
}

void MaxPool2d::release_activations() {
  saved_ = false;
  x_shape_.clear();
  argmax_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
}

}  // namespace tandem
