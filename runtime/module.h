// Parameters and modules. A Module owns its named parameters and, when it is built from
// others (a transformer block: LayerNorms, attention, an MLP), its named sub-modules;
// forward saves what backward needs; backward returns the input gradient and ACCUMULATES
// parameter gradients into Parameter::grad (callers zero them between steps, which is
// what makes gradient accumulation free). Parameter::grad may be rebound at any time to
// a view into caller-provided storage (the DDP reducer's bucket buffer): modules only
// ever write through the tensor, never reallocate it.
//
// Gradient-ready: a parameter is reported once its gradient is final for this backward.
// The container reports a module's OWN parameters after its backward returns; a module
// with sub-modules runs each child's backward through backward_child(), which reports
// that child's own parameters as soon as it returns, so a block's first sub-module's
// gradients reach the DDP reducer while the block's other sub-modules still run. A
// module may use a parameter it does not own (a tied LM head uses the token
// embedding): it accumulates into that gradient, and the owner reports it after its own
// backward, which is the parameter's last use in backward.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tandem/runtime/precision.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// requires_grad = false freezes a parameter (runtime/freeze.h), as PyTorch's
// requires_grad_(False): layers skip its weight-gradient products and leave grad as it
// is (zero), the DDP reducer leaves it out of every bucket, ZeRO does not shard it, and
// optimizers hold no state for it and never update it. Strategies read the flag when
// they are built, so it is set inside the model factory given to parallelize().
struct Parameter {
  std::string name;  // full dotted name, e.g. "fc1.weight"; no mode prefix, ever
  Tensor value;
  Tensor grad;  // same shape, dtype and device as value
  bool requires_grad = true;
};

// ModuleBuffer: named module state that is not trained (BatchNorm's running mean and variance,
// its count of batches), as PyTorch's register_buffer. Checkpoints save and load buffers
// with the parameters (model.safetensors, under the same dotted names); the reducer never
// sees them (no gradient, never bucketed); every replica holds its own copy, which the
// strategies keep equal: DDP broadcasts rank 0's after each forward (ParallelOptions::
// broadcast_buffers), DataParallel copies device 0's to the replicas before each step.
struct ModuleBuffer {
  std::string name;  // full dotted name, e.g. "bn1.running_mean"
  Tensor value;
};

// Deterministic per-parameter random stream: the same (seed, name) gives the same
// values on every rank, device and mode, independent of registration order.
std::mt19937_64 parameter_rng(uint64_t seed, const std::string& name);
// Uniform in [-bound, bound) drawn from rng, written into a CPU buffer.
void fill_uniform(std::vector<float>& out, std::mt19937_64& rng, float bound);

class Module {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  virtual ~Module() = default;
  virtual std::string kind() const = 0;  // "Linear", "Conv2d", ...

  // x on the module's device. Saves whatever backward needs.
  virtual Tensor forward(const Tensor& x) = 0;
  // dy matches forward's output; returns dx matching forward's input, and adds the
  // parameter gradients into each Parameter::grad.
  virtual Tensor backward(const Tensor& dy) = 0;
  // Fills the parameters deterministically from the seed (PyTorch's default schemes).
  // The default resets every sub-module.
  virtual void reset_parameters(uint64_t seed);
  // Non-parameter state a resumed run must restore to continue bit-identically (e.g.
  // Dropout's forward counter), as name -> integer. Checkpoints carry it in meta.json.
  // The default gathers the sub-modules' as "child.name".
  virtual std::map<std::string, uint64_t> counters() const;
  // Restores counters(); throws std::invalid_argument naming an unknown name. The
  // default routes "child.name" to that sub-module.
  virtual void set_counter(const std::string& name, uint64_t value);

  // Drops everything forward saved for backward and every buffer the module keeps for
  // reuse across steps (outputs, input gradients, scratch), in this module and every
  // sub-module: the memory is free once nobody else holds it, and the next forward
  // allocates afresh. Activation checkpointing (runtime/layers/activation_checkpoint.h)
  // calls it after each forward of the module it wraps. A layer that keeps tensors
  // overrides it and calls Module::release_activations() for its sub-modules.
  virtual void release_activations();
  // Calls fn on this module, then on every sub-module, depth first, in registration
  // order (a strategy finds its BatchNorm layers so).
  void visit(const std::function<void(Module&)>& fn);

  // Training mode for this module and every sub-module. Out of training (evaluation,
  // sampling) a forward keeps nothing for a backward, as PyTorch under no_grad: its
  // input's buffer is free for the next batch, and backward then says no forward ran.
  void set_training(bool training);
  bool training() const { return training_; }
  // Precision of the matrix products of this module and every sub-module
  // (runtime/precision.h). Parameters and gradients stay f32 either way.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // When false, backward may skip computing dx and return an undefined Tensor (and a
  // layer without parameters may then receive an undefined dy). Meant for a model's
  // leading layers, whose input is data nobody differentiates: PyTorch skips that GEMM
  // for the same reason (the input has requires_grad=False). Default true.
  void set_needs_input_grad(bool needed) { needs_input_grad_ = needed; }
  bool needs_input_grad() const { return needs_input_grad_; }
  // Gives parameters their full names ("fc1" + ".weight", "blocks.0" + ".attn.qkv.weight");
  // called by the container.
  void set_prefix(const std::string& prefix);
  // Every parameter this module owns, then each sub-module's, in registration order.
  std::vector<Parameter*> parameters();
  // The same for buffers: this module's, then each sub-module's, in registration order.
  std::vector<ModuleBuffer*> buffers();
  // The parameters this module registered itself (not its sub-modules').
  std::vector<Parameter*> own_parameters();
  // Moves parameters (values and gradients) and buffers to a device, sub-modules included.
  void to(Device device);
  Device device() const { return device_; }
  // Where backward_child reports ready parameters (null: nowhere); set on the whole tree
  // by the container, which keeps the hook alive.
  void set_grad_ready_hook(const GradReadyHook* hook);

 protected:
  // Registers a parameter with a local name ("weight"); value and grad are zeroed.
  Parameter& add_parameter(const std::string& local_name, const Shape& shape);
  // Registers a buffer with a local name ("running_mean"), zeroed, of any dtype.
  ModuleBuffer& add_buffer(const std::string& local_name, const Shape& shape, DType dtype = DType::f32);
  // Registers a sub-module under a local name and returns it. An empty local name makes
  // the child transparent: its parameters, buffers and counters take this module's
  // prefix unchanged (a wrapper that must not rename what it wraps). At most one
  // transparent child, and then no other member.
  template <typename M>
  M& add_module(const std::string& local_name, std::unique_ptr<M> child) {
    M& ref = *child;
    adopt(local_name, std::move(child));
    return ref;
  }
  // child.backward(dy), then reports the child's own parameters ready (reverse
  // registration order: bias before weight). Its sub-modules reported theirs inside it.
  Tensor backward_child(Module& child, const Tensor& dy);
  // Reports `module`'s own parameters ready through the hook, if one is set.
  void report_ready(Module& module);

  bool training_ = true;
  bool needs_input_grad_ = true;
  Precision precision_ = Precision::fp32;
  Device device_ = Device::cpu();

 private:
  void adopt(const std::string& local_name, std::unique_ptr<Module> child);

  void check_new_name(const std::string& local_name, const char* what) const;

  std::vector<std::string> local_names_;  // the parameters'
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::string> buffer_names_;
  std::vector<std::unique_ptr<ModuleBuffer>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  const GradReadyHook* hook_ = nullptr;
};

}  // namespace tandem
