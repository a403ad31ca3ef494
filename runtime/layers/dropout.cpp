// Dropout forward/backward over the device kernels.
#include "runtime/layers/dropout.h"

#include <cmath>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Dropout::Dropout(float p, uint64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0.f && p <= 1.f))
    throw std::invalid_argument("Dropout: p must be in [0, 1], got " + std::to_string(p));
}

uint64_t Dropout::mask_seed(uint64_t t) const {
  // splitmix64 finaliser of (seed, t): nearby seeds and steps give unrelated masks.
  uint64_t z = seed_ ^ ((t + 1) * 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Tensor Dropout::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, x.device());
  y_shape_ = x.shape();
  if (!training() || p_ == 0.f) {
    saved_ = Saved::identity;
    return x;
  }
  saved_ = Saved::none;
  Tensor y = reuse_buffer(y_cache_, x.shape(), x.device());
  reuse_buffer(mask_, x.shape(), x.device());
  kernels_for(x.device())
      .dropout_forward(y.f32(), mask_.f32(), x.f32(), x.numel(), p_, mask_seed(calls_));
  ++calls_;
  saved_ = Saved::mask;
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  check_saved(kind(), saved_ != Saved::none);
  const Saved saved = saved_;
  saved_ = Saved::none;
  if (!needs_input_grad_) return Tensor();
  check_tensor(kind(), "output gradient", dy, dy.device());
  if (dy.shape() != y_shape_)
    throw_shape_error(kind(), "output gradient", shape_str(y_shape_), dy.shape());
  if (saved == Saved::identity) return dy;
  check_tensor(kind(), "output gradient", dy, mask_.device());
  Tensor dx = reuse_buffer(dx_cache_, y_shape_, mask_.device());
  kernels_for(dx.device()).mul(dx.f32(), dy.f32(), mask_.f32(), dx.numel());
  return dx;
}

void Dropout::release_activations() {
  // calls_ is a counter, not an activation: the mask sequence goes on.
  saved_ = Saved::none;
  y_shape_.clear();
  mask_ = Tensor();
  y_cache_ = Tensor();
  dx_cache_ = Tensor();
}

}  // namespace tandem
