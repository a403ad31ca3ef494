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

void Module::reset_parameters(uint64_t seed) {
  for (auto& [name, child] : children_) child->reset_parameters(seed);
}

std::map<std::string, uint64_t> Module::counters() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, child] : children_)
    for (const auto& [key, value] : child->counters()) out[name + "." + key] = value;
  return out;
}

void Module::set_counter(const std::string& name, uint64_t value) {
  const size_t dot = name.find('.');
  if (dot != std::string::npos)
    for (auto& [child_name, child] : children_)
      if (name.compare(0, dot, child_name) == 0 && child_name.size() == dot)
        return child->set_counter(name.substr(dot + 1), value);
  throw std::invalid_argument(kind() + " has no counter '" + name + "'");
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->set_training(training);
}

void Module::set_precision(Precision precision) {
  precision_ = precision;
  for (auto& [name, child] : children_) child->set_precision(precision);
}

void Module::set_prefix(const std::string& prefix) {
  auto join = [&](const std::string& local) { return prefix.empty() ? local : prefix + "." + local; };
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->name = join(local_names_[i]);
  for (auto& [name, child] : children_) child->set_prefix(join(name));
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out = own_parameters();
  for (auto& [name, child] : children_)
    for (Parameter* p : child->parameters()) out.push_back(p);
  return out;
}

std::vector<Parameter*> Module::own_parameters() {
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
  for (auto& [name, child] : children_) child->to(device);
  device_ = device;
}

void Module::set_grad_ready_hook(const GradReadyHook* hook) {
  hook_ = hook;
  for (auto& [name, child] : children_) child->set_grad_ready_hook(hook);
}

void Module::adopt(const std::string& local_name, std::unique_ptr<Module> child) {
  if (local_name.empty() || local_name.find('.') != std::string::npos)
    throw std::invalid_argument(kind() + ": a sub-module name must be non-empty and without '.', got '" +
                                local_name + "'");
  for (const auto& [name, c] : children_)
    if (name == local_name) throw std::invalid_argument(kind() + ": duplicate sub-module '" + local_name + "'");
  for (const std::string& name : local_names_)
    if (name == local_name)
      throw std::invalid_argument(kind() + ": sub-module '" + local_name + "' clashes with a parameter");
  child->to(device_);
  child->set_training(training_);
  child->set_precision(precision_);
  child->set_grad_ready_hook(hook_);
  children_.emplace_back(local_name, std::move(child));
}

Tensor Module::backward_child(Module& child, const Tensor& dy) {
  Tensor dx = child.backward(dy);
  report_ready(child);
  return dx;
}

void Module::report_ready(Module& module) {
  if (!hook_ || !*hook_) return;
  auto ps = module.own_parameters();
  for (size_t j = ps.size(); j-- > 0;) (*hook_)(*ps[j]);
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
