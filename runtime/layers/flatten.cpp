// Flatten forward/backward: reshapes only.
#include "runtime/layers/flatten.h"

#include "runtime/layers/layer_util.h"

namespace tandem {

Tensor Flatten::forward(const Tensor& x) {
  if (!x.defined() || x.ndim() < 2)
    throw_shape_error(kind(), "input", "(N, ...) with at least 2 dims", x.shape());
  int64_t features = 1;
  for (int i = 1; i < x.ndim(); ++i) features *= x.dim(i);
  x_shape_ = x.shape();
  y_shape_ = {x.dim(0), features};
  saved_ = true;
  return x.reshape(y_shape_);
}

Tensor Flatten::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  saved_ = false;
  if (!needs_input_grad_) return Tensor();
  if (!dy.defined() || dy.shape() != y_shape_)
    throw_shape_error(kind(), "output gradient", shape_str(y_shape_), dy.shape());
  return dy.reshape(x_shape_);
}

void Flatten::release_activations() { saved_ = false; }  // the shapes alone hold no memory

}  // namespace tandem
