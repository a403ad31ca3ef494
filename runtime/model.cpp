// Model: sequential forward/backward and the gradient-ready seam.
#include "runtime/model.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "runtime/kernels.h"

namespace tandem {

Model& Model::add(const std::string& name, std::unique_ptr<Module> module) {
  for (const auto& l : layers_)
    if (l.name == name) throw std::invalid_argument("duplicate layer name '" + name + "'");
  module->set_prefix(name);
  // Nothing before the first layer with parameters needs an input gradient (the data
  // does not require one), so the first Linear/Conv2d skips its dx GEMM, as PyTorch does.
  module->set_needs_input_grad(!params_.empty());
  module->to(device_);
  module->set_precision(precision_);
  module->set_grad_ready_hook(&hook_);
  for (Parameter* p : module->parameters()) params_.push_back(p);
  for (ModuleBuffer* b : module->buffers()) buffers_.push_back(b);
  layer_params_.push_back(params_.size());
  layers_.push_back({name, std::move(module)});
  return *this;
}

Tensor Model::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) {
    before_forward(*l.module);
    if (tracer_) {
      Tracer::Scope span(tracer_, "forward " + l.name);
      h = l.module->forward(h);
    } else {
      h = l.module->forward(h);
    }
  }
  return h;
}

size_t Model::first_trainable_layer() const {
  for (size_t i = 0; i < layers_.size(); ++i)
    for (size_t p = layer_params_[i]; p < layer_params_[i + 1]; ++p)
      if (params_[p]->requires_grad) return i;
  return layers_.size();
}

Tensor Model::backward(const Tensor& dy) {
  // Layers before the first one with a trainable parameter are not run backward at all:
  // nothing before them takes a gradient (the data needs none, and their own parameters
  // are frozen), as autograd skips what nothing requiring a gradient depends on. That
  // first layer skips its input-gradient product too. A caller that asked for the input's
  // gradient (the first layer's needs_input_grad) gets every layer run.
  const bool input_grad = !layers_.empty() && layers_[0].module->needs_input_grad();
  const size_t first = input_grad ? 0 : first_trainable_layer();
  Tensor g = dy;
  for (size_t i = layers_.size(); i-- > first;) {
    Module& m = *layers_[i].module;
    const bool needs_dx = m.needs_input_grad();
    if (i == first && first > 0) m.set_needs_input_grad(false);
    if (tracer_) {
      Tracer::Scope span(tracer_, "backward " + layers_[i].name);
      g = m.backward(g);
    } else {
      g = m.backward(g);
    }
    m.set_needs_input_grad(needs_dx);
    fire_grad_ready(m);
  }
  return first == 0 ? g : Tensor();
}

Tensor Model::backward_outputs(std::span<const Tensor> douts) {
  if (douts.size() != 1 || !douts[0].defined())
    throw std::invalid_argument("Model::backward_outputs: a model with one output takes one gradient, got " +
                                std::to_string(douts.size()) +
                                (douts.size() == 1 ? " undefined" : "") +
                                " (a model with several outputs overrides forward_outputs and backward_outputs)");
  return backward(douts[0]);
}

void Model::fire_grad_ready(Module& module) {
  if (!hook_) return;
  // The layer's own parameters (its sub-modules reported theirs as each finished), in
  // reverse registration order (bias before weight), the order a reverse-order bucket
  // assignment expects.
  auto ps = module.own_parameters();
  for (size_t j = ps.size(); j-- > 0;) hook_(*ps[j]);
}

std::map<std::string, uint64_t> Model::counters() const {
  std::map<std::string, uint64_t> out;
  for (const auto& l : layers_)
    for (const auto& [name, value] : l.module->counters()) out[l.name + "." + name] = value;
  return out;
}

void Model::set_counters(const std::map<std::string, uint64_t>& counters) {
  for (const auto& [full, value] : counters) {
    size_t dot = full.find('.');
    std::string layer = full.substr(0, dot);
    auto it = std::find_if(layers_.begin(), layers_.end(), [&](const Layer& l) { return l.name == layer; });
    if (it == layers_.end() || dot == std::string::npos)
      throw std::invalid_argument("no layer for the counter '" + full + "' in this model");
    it->module->set_counter(full.substr(dot + 1), value);
  }
}

Parameter* Model::find(const std::string& name) const {
  for (Parameter* p : params_)
    if (p->name == name) return p;
  return nullptr;
}

ModuleBuffer* Model::find_buffer(const std::string& name) const {
  for (ModuleBuffer* b : buffers_)
    if (b->name == name) return b;
  return nullptr;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const Parameter* p : params_) n += p->value.numel();
  return n;
}

void Model::zero_grad() {
  // Runs of adjacent (or shared) gradient storage per device, in address order.
  struct Run {
    Device device;
    float* begin;
    float* end;
  };
  std::vector<Run> runs;
  for (const Parameter* p : params_)
    if (p->grad.defined() && p->grad.numel() > 0)
      runs.push_back({p->grad.device(), p->grad.f32(), p->grad.f32() + p->grad.numel()});
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    if (!(a.device == b.device)) return a.device.str() < b.device.str();
    return std::less<const float*>()(a.begin, b.begin);
  });
  for (size_t i = 0; i < runs.size();) {
    Run run = runs[i];
    const std::less<const float*> before;
    for (++i; i < runs.size() && runs[i].device == run.device && !before(run.end, runs[i].begin); ++i)
      if (std::less<const float*>()(run.end, runs[i].end)) run.end = runs[i].end;
    kernels_for(run.device).fill(run.begin, run.end - run.begin, 0.f);
  }
}

void Model::flatten_gradients() {
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (const Parameter* p : params_) {
    if (!(p->grad.device() == device_))
      throw std::logic_error("flatten_gradients: " + p->name + "'s gradient is on " + p->grad.device().str() +
                             ", the model on " + device_.str());
    offsets.push_back(total);
    total += p->grad.numel();
  }
  Tensor flat = Tensor::zeros({total}, DType::f32, device_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    Tensor view = flat.view(offsets[i], p.grad.shape());
    view.copy_from(p.grad);
    p.grad = view;
  }
  flat_grad_ = flat;
  flat_offsets_ = std::move(offsets);
}

bool Model::flat_gradients_current() const {
  if (!flat_grad_.defined() || flat_offsets_.size() != params_.size()) return false;
  const auto* base = static_cast<const float*>(flat_grad_.raw());
  for (size_t i = 0; i < params_.size(); ++i)
    if (static_cast<const float*>(params_[i]->grad.raw()) != base + flat_offsets_[i]) return false;
  return true;
}

void Model::set_training(bool training) {
  for (auto& l : layers_) l.module->set_training(training);
}

void Model::set_precision(Precision precision) {
  precision_ = precision;
  for (auto& l : layers_) l.module->set_precision(precision);
}

void Model::reset_parameters(uint64_t seed) {
  for (auto& l : layers_) l.module->reset_parameters(seed);
}

void Model::to(Device device) {
  for (auto& l : layers_) l.module->to(device);
  device_ = device;
}

namespace {

// FNV-1a 64 over the host bytes of named tensors, in name order, as 16 hex digits.
template <typename Named>
std::string checksum_by_name(std::vector<const Named*> sorted) {
  std::sort(sorted.begin(), sorted.end(), [](const Named* a, const Named* b) { return a->name < b->name; });
  uint64_t h = 1469598103934665603ull;
  for (const Named* p : sorted) {
    Tensor host = p->value.device().is_cpu() ? p->value : p->value.to(Device::cpu());
    const unsigned char* bytes = static_cast<const unsigned char*>(host.raw());
    for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::string parameter_checksum(const Model& model) {
  return checksum_by_name(std::vector<const Parameter*>(model.parameters().begin(), model.parameters().end()));
}

std::string buffer_checksum(const Model& model) {
  return checksum_by_name(std::vector<const ModuleBuffer*>(model.buffers().begin(), model.buffers().end()));
}

}  // namespace tandem
