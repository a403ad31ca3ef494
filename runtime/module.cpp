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

void Module::release_activations() {
  for (auto& [name, child] : children_) child->release_activations();
}

void Module::visit(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->visit(fn);
}

std::map<std::string, uint64_t> Module::counters() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, child] : children_)
    for (const auto& [key, value] : child->counters()) out[name.empty() ? key : name + "." + key] = value;
  return out;
}

void Module::set_counter(const std::string& name, uint64_t value) {
  if (children_.size() == 1 && children_[0].first.empty()) return children_[0].second->set_counter(name, value);
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
  auto join = [&](const std::string& local) {
    return prefix.empty() ? local : local.empty() ? prefix : prefix + "." + local;
  };
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->name = join(local_names_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i]->name = join(buffer_names_[i]);
  for (auto& [name, child] : children_) child->set_prefix(join(name));
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out = own_parameters();
  for (auto& [name, child] : children_)
    for (Parameter* p : child->parameters()) out.push_back(p);
  return out;
}

std::vector<ModuleBuffer*> Module::buffers() {
  std::vector<ModuleBuffer*> out;
  for (auto& b : buffers_) out.push_back(b.get());
  for (auto& [name, child] : children_)
    for (ModuleBuffer* b : child->buffers()) out.push_back(b);
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
  for (auto& b : buffers_)
    if (b->value.device() != device) b->value = b->value.to(device);
  for (auto& [name, child] : children_) child->to(device);
  device_ = device;
}

void Module::set_grad_ready_hook(const GradReadyHook* hook) {
  hook_ = hook;
  for (auto& [name, child] : children_) child->set_grad_ready_hook(hook);
}

void Module::adopt(const std::string& local_name, std::unique_ptr<Module> child) {
  if (local_name.find('.') != std::string::npos)
    throw std::invalid_argument(kind() + ": a sub-module name must not contain '.', got '" + local_name + "'");
  const bool transparent = children_.size() == 1 && children_[0].first.empty();
  if (transparent || (local_name.empty() && (!children_.empty() || !params_.empty() || !buffers_.empty())))
    throw std::invalid_argument(kind() + ": a transparent sub-module (empty name) must be the only member");
  check_new_name(local_name, "sub-module");
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

void Module::check_new_name(const std::string& local_name, const char* what) const {
  if (children_.size() == 1 && children_[0].first.empty())
    throw std::invalid_argument(kind() + ": " + what + " '" + local_name +
                                "' added beside a transparent sub-module, which must be the only member");
  auto clash = [&](const char* other) {
    throw std::invalid_argument(kind() + ": " + what + " '" + local_name + "' clashes with a " + other +
                                " of the same name");
  };
  for (const auto& [name, c] : children_)
    if (name == local_name) clash("sub-module");
  for (const std::string& name : local_names_)
    if (name == local_name) clash("parameter");
  for (const std::string& name : buffer_names_)
    if (name == local_name) clash("buffer");
}

ModuleBuffer& Module::add_buffer(const std::string& local_name, const Shape& shape, DType dtype) {
  check_new_name(local_name, "buffer");
  auto b = std::make_unique<ModuleBuffer>();
  b->name = local_name;
  b->value = Tensor::zeros(shape, dtype, device_);
  buffer_names_.push_back(local_name);
  buffers_.push_back(std::move(b));
  return *buffers_.back();
}

Parameter& Module::add_parameter(const std::string& local_name, const Shape& shape) {
  check_new_name(local_name, "parameter");
  auto p = std::make_unique<Parameter>();
  p->name = local_name;
  p->value = Tensor::zeros(shape, DType::f32, device_);
  p->grad = Tensor::zeros(shape, DType::f32, device_);
  local_names_.push_back(local_name);
  params_.push_back(std::move(p));
  return *params_.back();
}

}  // namespace tandem
