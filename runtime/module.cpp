// Module parameter bookkeeping and deterministic initialisation helpers.
#include "runtime/module.h"

#include <cstring>
#include <stdexcept>

#include "runtime/kernels.h"

namespace tandem {

std::mt19937_64 parameter_rng(uint64_t seed, const std::string& name) {
  // FNV-1a of the name, mixed with the seed: independent of registration order.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
  return std::mt19937_64(seq);
}

void fill_uniform(std::vector<float>& out, std::mt19937_64& rng, float bound) {
  // 24 random bits -> [0,1) exactly representable; portable across standard libraries.
  for (float& v : out) {
    float u = static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
    v = (2.0f * u - 1.0f) * bound;
  }
}

void Module::set_counter(const std::string& name, uint64_t) {
  throw std::invalid_argument(kind() + " has no counter '" + name + "'");
}

void Module::set_prefix(const std::string& prefix) {
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i]->name = prefix.empty() ? local_names_[i] : prefix + "." + local_names_[i];
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

void Module::to(Device device) {
  for (auto& p : params_) {
    if (p->value.device() == device) continue;
    p->value = p->value.to(device);
    p->grad = p->grad.to(device);
  }
  device_ = device;
}

Parameter& Module::add_parameter(const std::string& local_name, const Shape& shape) {
  auto p = std::make_unique<Parameter>();
  p->name = local_name;
  p->value = Tensor::zeros(shape, DType::f32, device_);
  p->grad = Tensor::zeros(shape, DType::f32, device_);
  local_names_.push_back(local_name);
  params_.push_back(std::move(p));
  return *params_.back();
}

}  // namespace tandem
