// Embedding and PositionEmbedding forward/backward over the device kernels.
#include "runtime/layers/embedding.h"

#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Embedding::Embedding(int64_t vocab_size, int64_t dim) : vocab_(vocab_size), dim_(dim) {
  if (vocab_size <= 0 || dim <= 0)
    throw std::invalid_argument("Embedding: vocab_size and dim must be positive, got " + std::to_string(vocab_size) +
                                " and " + std::to_string(dim));
  weight_ = &add_parameter("weight", {vocab_, dim_});
}

void Embedding::reset_parameters(uint64_t seed) { init_normal(*weight_, seed, 1.0f); }

Tensor Embedding::forward(const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::i32)
    throw std::invalid_argument("Embedding: input must be i32 token ids, got " +
                                std::string(ids.defined() ? dtype_name(ids.dtype()) : "undefined"));
  if (!(ids.device() == device_))
    throw std::invalid_argument("Embedding: ids are on " + ids.device().str() + " but the layer is on " +
                                device_.str());
  // Ids come from a loader that encoded them, or from a user's prompt: an id outside the
  // table would read past it, so host ids are checked (device ids were checked on the host).
  if (ids.device().is_cpu()) {
    const int32_t* p = ids.data<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i)
      if (p[i] < 0 || p[i] >= vocab_)
        throw std::out_of_range("Embedding: token id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  }
  Shape y_shape = ids.shape();
  y_shape.push_back(dim_);
  Tensor y = reuse_buffer(y_cache_, y_shape, device_);
  kernels_for(device_).embedding_forward(y.f32(), weight_->value.f32(), ids.data<int32_t>(), ids.numel(), dim_);
  if (training_) ids_ = ids;
  return y;
}

Tensor Embedding::backward(const Tensor& dy) {
  check_saved(kind(), ids_.defined());
  check_tensor(kind(), "output gradient", dy, device_);
  if (dy.numel() != ids_.numel() * dim_)
    throw_shape_error(kind(), "output gradient", shape_str(ids_.shape()) + " x " + std::to_string(dim_), dy.shape());
  if (weight_->requires_grad)  // frozen: no gradient
    kernels_for(device_).embedding_backward_acc(grad_ptr(*weight_), dy.f32(), ids_.data<int32_t>(), ids_.numel(),
                                                dim_, vocab_);
  ids_ = Tensor();
  return Tensor();
}

PositionEmbedding::PositionEmbedding(int64_t max_positions, int64_t dim) : max_positions_(max_positions), dim_(dim) {
  if (max_positions <= 0 || dim <= 0)
    throw std::invalid_argument("PositionEmbedding: max_positions and dim must be positive, got " +
                                std::to_string(max_positions) + " and " + std::to_string(dim));
  weight_ = &add_parameter("weight", {max_positions_, dim_});
}

void PositionEmbedding::reset_parameters(uint64_t seed) { init_normal(*weight_, seed, 1.0f); }

Tensor PositionEmbedding::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  if (x.ndim() != 3 || x.dim(2) != dim_ || x.dim(1) > max_positions_)
    throw_shape_error(kind(), "input", "(B, T <= " + std::to_string(max_positions_) + ", " + std::to_string(dim_) + ")",
                      x.shape());
  const int64_t b = x.dim(0), tc = x.dim(1) * dim_;
  Kernels& k = kernels_for(device_);
  Tensor y = reuse_buffer(y_cache_, x.shape(), device_);
  k.copy(y.f32(), x.f32(), x.numel());
  // Rows t < T of the table are its first T*dim elements: one bias of T*dim per sequence.
  k.add_bias_rows(y.f32(), weight_->value.f32(), b, tc);
  x_shape_ = x.shape();
  return y;
}

Tensor PositionEmbedding::backward(const Tensor& dy) {
  check_saved(kind(), !x_shape_.empty());
  check_tensor(kind(), "output gradient", dy, device_);
  if (dy.shape() != x_shape_) throw_shape_error(kind(), "output gradient", shape_str(x_shape_), dy.shape());
  if (weight_->requires_grad)  // frozen: no gradient
    kernels_for(device_).sum_rows_acc(grad_ptr(*weight_), dy.f32(), x_shape_[0], x_shape_[1] * dim_);
  x_shape_.clear();
  return dy;  // d(x + w)/dx is the identity
}

void Embedding::release_activations() {
  ids_ = Tensor();
  y_cache_ = Tensor();
}

void PositionEmbedding::release_activations() {
  x_shape_.clear();
  y_cache_ = Tensor();
}

}  // namespace tandem
