// Shared layer helpers: shape errors, buffer reuse, device-agnostic initialisation.
#include "runtime/layers/layer_util.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "runtime/allocator.h"

namespace tandem {

namespace {
// host[0, n) into elements [at, at + n) of p's value (f32), with no staging tensor.
void write_values(Parameter& p, const float* host, int64_t at, int64_t n) {
  if (p.value.dtype() != DType::f32)
    throw std::logic_error("parameter " + p.name + ": initialised as f32, held as " + dtype_name(p.value.dtype()));
  device_copy(p.value.f32() + at, p.value.device(), host, Device::cpu(), static_cast<size_t>(n) * sizeof(float));
}
}  // namespace

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
  // In chunks of 1M values (the generator's sequence runs on across them): a large
  // matrix is never held twice, which would raise the process's peak memory at start.
  const int64_t n = p.value.numel();
  std::vector<float> host(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
  auto rng = parameter_rng(seed, p.name);
  for (int64_t at = 0; at < n; at += static_cast<int64_t>(host.size())) {
    host.resize(static_cast<size_t>(std::min<int64_t>(n - at, static_cast<int64_t>(host.size()))));
    fill_uniform(host, rng, bound);
    write_values(p, host.data(), at, static_cast<int64_t>(host.size()));
  }
}

void init_constant(Parameter& p, float value) {
  std::vector<float> host(static_cast<size_t>(p.value.numel()), value);
  write_values(p, host.data(), 0, p.value.numel());
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
  write_values(p, host.data(), 0, p.value.numel());
}

}  // namespace tandem
