// Shared layer helpers: shape errors, buffer reuse, device-agnostic initialisation.
#include "runtime/layers/layer_util.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace tandem {

void throw_shape_error(const std::string& kind, const std::string& what, const std::string& expected,
                       const Shape& got) {
  throw std::invalid_argument(kind + ": " + what + " must be " + expected + ", got " + shape_str(got));
}

void check_tensor(const std::string& kind, const std::string& what, const Tensor& x, Device device) {
  if (!x.defined()) throw std::invalid_argument(kind + ": " + what + " is undefined");
  if (x.dtype() != DType::f32)
    throw std::invalid_argument(kind + ": " + what + " must be f32, got " + dtype_name(x.dtype()));
  if (!(x.device() == device))
    throw std::invalid_argument(kind + ": " + what + " is on " + x.device().str() +
                                " but the layer is on " + device.str());
}

void check_saved(const std::string& kind, bool saved) {
  if (!saved) throw std::logic_error(kind + ": backward called without a preceding forward");
}

Tensor reuse_buffer(Tensor& cache, const Shape& shape, Device device, DType dtype) {
  // use_count() == 1: only `cache` holds the storage, so no tensor handed out earlier
  // (an activation saved by the next layer, a caller's variable) can see the overwrite.
  if (cache.defined() && cache.storage().use_count() == 1 && cache.shape() == shape &&
      cache.dtype() == dtype && cache.device() == device)
    return cache;
  cache = Tensor::empty(shape, dtype, device);
  return cache;
}

float* grad_ptr(Parameter& p) {
  if (!p.grad.defined() || p.grad.numel() != p.value.numel() || !(p.grad.device() == p.value.device()))
    throw std::logic_error("parameter " + p.name + ": grad " +
                           (p.grad.defined() ? shape_str(p.grad.shape()) + " on " + p.grad.device().str()
                                             : std::string("undefined")) +
                           " does not match value " + shape_str(p.value.shape()) + " on " +
                           p.value.device().str());
  return p.grad.f32();
}

void init_uniform(Parameter& p, uint64_t seed, float bound) {
  std::vector<float> host(static_cast<size_t>(p.value.numel()));
  auto rng = parameter_rng(seed, p.name);
  fill_uniform(host, rng, bound);
  p.value.copy_from(Tensor::from_vector(host, p.value.shape()));
}

void init_constant(Parameter& p, float value) {
  std::vector<float> host(static_cast<size_t>(p.value.numel()), value);
  p.value.copy_from(Tensor::from_vector(host, p.value.shape()));
}

void init_normal(Parameter& p, uint64_t seed, float std) {
  std::vector<float> host(static_cast<size_t>(p.value.numel()));
  auto rng = parameter_rng(seed, p.name);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };  // (0, 1)
  for (size_t i = 0; i < host.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), theta = 2.0 * std::numbers::pi * uniform();
    host[i] = static_cast<float>(std * r * std::cos(theta));
    if (i + 1 < host.size()) host[i + 1] = static_cast<float>(std * r * std::sin(theta));
  }
  p.value.copy_from(Tensor::from_vector(host, p.value.shape()));
}

}  // namespace tandem
