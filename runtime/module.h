// Parameters and modules. A Module owns its named parameters; forward saves what
// backward needs; backward returns the input gradient and ACCUMULATES parameter
// gradients into Parameter::grad (callers zero them between steps, which is what
// makes gradient accumulation free). Parameter::grad may be rebound at any time to a
// view into caller-provided storage (the DDP reducer's bucket buffer): modules only
// ever write through the tensor, never reallocate it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tandem {

struct Parameter {
  std::string name;  // full dotted name, e.g. "fc1.weight"; no mode prefix, ever
  Tensor value;
  Tensor grad;  // same shape, dtype and device as value
};

// Deterministic per-parameter random stream: the same (seed, name) gives the same
// values on every rank, device and mode, independent of registration order.
std::mt19937_64 parameter_rng(uint64_t seed, const std::string& name);
// Uniform in [-bound, bound) drawn from rng, written into a CPU buffer.
void fill_uniform(std::vector<float>& out, std::mt19937_64& rng, float bound);

class Module {
 public:
  virtual ~Module() = default;
  virtual std::string kind() const = 0;  // "Linear", "Conv2d", ...

  // x on the module's device. Saves whatever backward needs.
  virtual Tensor forward(const Tensor& x) = 0;
  // dy matches forward's output; returns dx matching forward's input, and adds the
  // parameter gradients into each Parameter::grad.
  virtual Tensor backward(const Tensor& dy) = 0;
  // Fills the parameters deterministically from the seed (PyTorch's default schemes).
  virtual void reset_parameters(uint64_t seed) {}
  // Non-parameter state a resumed run must restore to continue bit-identically (e.g.
  // Dropout's forward counter), as name -> integer. Checkpoints carry it in meta.json.
  virtual std::map<std::string, uint64_t> counters() const { return {}; }
  // Restores counters(); throws std::invalid_argument naming an unknown name.
  virtual void set_counter(const std::string& name, uint64_t value);

  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }
  // When false, backward may skip computing dx and return an undefined Tensor (and a
  // layer without parameters may then receive an undefined dy). Meant for a model's
  // leading layers, whose input is data nobody differentiates: PyTorch skips that GEMM
  // for the same reason (the input has requires_grad=False). Default true.
  void set_needs_input_grad(bool needed) { needs_input_grad_ = needed; }
  bool needs_input_grad() const { return needs_input_grad_; }
  // Gives parameters their full names ("fc1" + ".weight"); called by the container.
  void set_prefix(const std::string& prefix);
  std::vector<Parameter*> parameters();
  // Moves parameters (values and gradients) to a device.
  void to(Device device);
  Device device() const { return device_; }

 protected:
  // Registers a parameter with a local name ("weight"); value and grad are zeroed.
  Parameter& add_parameter(const std::string& local_name, const Shape& shape);

  bool training_ = true;
  bool needs_input_grad_ = true;
  Device device_ = Device::cpu();

 private:
  std::vector<std::string> local_names_;
  std::vector<std::unique_ptr<Parameter>> params_;
};

}  // namespace tandem
