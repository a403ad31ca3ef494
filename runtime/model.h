// Model: a named sequence of modules, the parameter registry, and the gradient-ready
// seam. backward() runs the layers in reverse; as soon as one layer has finished, its
// own parameters' gradients are final for this backward and the model fires the
// on_grad_ready hook for each of them (a layer built from sub-modules reports theirs
// as each sub-module finishes: runtime/module.h). The DDP reducer subscribes to it; a
// single-process run leaves it empty.
//
// Models with control flow (a branch taken by step parity, used to test unused
// parameters) subclass Model and override forward/backward, calling
// fire_grad_ready() for the parameters they did reach.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/runtime/module.h"
#include "tandem/runtime/trace.h"

namespace tandem {

class Model {
 public:
  using GradReadyHook = Module::GradReadyHook;

  Model() = default;
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Appends a layer named `name` (parameter names become "name.weight", ...).
  Model& add(const std::string& name, std::unique_ptr<Module> module);

  virtual Tensor forward(const Tensor& x);
  // The layers in reverse, from the last down to the first layer that holds a trainable
  // parameter (runtime/freeze.h): the frozen layers before it have nothing to compute, so
  // they are skipped and the result is then an undefined Tensor. All of them run when the
  // first layer was asked for its input gradient (set_needs_input_grad(true)).
  virtual Tensor backward(const Tensor& dy);
  // Several outputs (a multi-task model's heads, a contrastive model's two embeddings): what
  // the strategies call, and what a model with more than one output overrides. The loss
  // (runtime/layers/loss.h) reads these outputs and backward_outputs receives one gradient
  // per output (undefined for an output no loss term read). The defaults are forward()'s
  // single output and backward() of its gradient.
  virtual std::vector<Tensor> forward_outputs(const Tensor& x) { return {forward(x)}; }
  virtual Tensor backward_outputs(std::span<const Tensor> douts);

  // Every parameter in registration order (a stable order: checkpoints, the reducer's
  // default bucket order and the checksum all use it).
  const std::vector<Parameter*>& parameters() const { return params_; }
  Parameter* find(const std::string& name) const;  // nullptr when absent
  // Every buffer (runtime/module.h) in registration order, and one by name.
  const std::vector<ModuleBuffer*>& buffers() const { return buffers_; }
  ModuleBuffer* find_buffer(const std::string& name) const;  // nullptr when absent
  int64_t num_parameters() const;                  // element count
  size_t layer_count() const { return layers_.size(); }
  Module& layer(size_t i) { return *layers_[i].module; }
  const std::string& layer_name(size_t i) const { return layers_[i].name; }

  // Every layer's counters() as "layer.name" -> value, and their restoration (a name
  // of no layer throws std::invalid_argument naming it).
  std::map<std::string, uint64_t> counters() const;
  void set_counters(const std::map<std::string, uint64_t>& counters);

  void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }
  // Called by forward() with each layer just before that layer runs (ZeRO waits there
  // for the all-gather of the layer's parameters). A subclass that overrides forward()
  // may call before_forward(layer) itself; a strategy must not rely on it being called.
  using ForwardPreHook = std::function<void(Module&)>;
  void set_forward_pre_hook(ForwardPreHook hook) { pre_hook_ = std::move(hook); }
  // Spans "forward <layer>" / "backward <layer>" go to this tracer (null: none).
  void set_tracer(Tracer* tracer) { tracer_ = tracer && tracer->enabled() ? tracer : nullptr; }
  // Zeroes every gradient with as few fills as the storage allows: gradients that sit
  // back to back in memory (flatten_gradients' buffer, a DDP bucket) go in one fill.
  void zero_grad();
  // Moves every gradient into one flat tensor on the model's device (values kept), each
  // parameter's grad a view of it in parameter order, so zero_grad is one fill and
  // DataParallel reduces replicas buffer by buffer. Call after to(); a later to() or a
  // strategy that re-points grads (DDP's buckets) leaves flat_gradients() stale, which
  // flat_gradients_current() tells.
  void flatten_gradients();
  const Tensor& flat_gradients() const { return flat_grad_; }
  bool flat_gradients_current() const;
  void set_training(bool training);
  // Every layer's matrix-product precision (runtime/precision.h), layers added later too.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  virtual void reset_parameters(uint64_t seed);
  void to(Device device);
  Device device() const { return device_; }

 protected:
  void fire_grad_ready(Module& module);
  // The first layer with a parameter that requires a gradient (layer_count() when none).
  size_t first_trainable_layer() const;
  void before_forward(Module& module) {
    if (pre_hook_) pre_hook_(module);
  }

  struct Layer {
    std::string name;
    std::unique_ptr<Module> module;
  };
  std::vector<Layer> layers_;
  std::vector<Parameter*> params_;
  std::vector<ModuleBuffer*> buffers_;
  std::vector<size_t> layer_params_{0};  // layer i's parameters are params_[layer_params_[i], layer_params_[i+1])
  GradReadyHook hook_;
  ForwardPreHook pre_hook_;
  Tracer* tracer_ = nullptr;
  Tensor flat_grad_;                   // flatten_gradients(): every grad's storage
  std::vector<int64_t> flat_offsets_;  // params_[i]'s grad at flat_grad_ + flat_offsets_[i]
  Device device_ = Device::cpu();
  Precision precision_ = Precision::fp32;
};

// Hash of every parameter's bytes in name order (FNV-1a 64 over the host copies),
// as 16 hex digits: equal checksums mean bit-identical parameters.
std::string parameter_checksum(const Model& model);
// The same over every buffer (runtime/module.h): equal checksums mean bit-identical
// buffers. A model without buffers gives the checksum of nothing.
std::string buffer_checksum(const Model& model);

}  // namespace tandem
