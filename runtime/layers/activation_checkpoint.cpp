// ActivationCheckpoint forward (run, keep the input, release) and backward (recompute
// with the first forward's counters, restore the buffers, then the module's backward).
#include "runtime/layers/activation_checkpoint.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

void set_counters(Module& module, const std::map<std::string, uint64_t>& counters) {
  for (const auto& [name, value] : counters) module.set_counter(name, value);
}

// The wrapped module's needs_input_grad is the wrapper's for one backward, then its own again.
class InputGradScope {
 public:
  InputGradScope(Module& module, bool needed) : module_(module), before_(module.needs_input_grad()) {
    module_.set_needs_input_grad(needed);
  }
  ~InputGradScope() { module_.set_needs_input_grad(before_); }
  InputGradScope(const InputGradScope&) = delete;
  InputGradScope& operator=(const InputGradScope&) = delete;

 private:
  Module& module_;
  bool before_;
};

}  // namespace

ActivationCheckpoint::ActivationCheckpoint(std::unique_ptr<Module> inner) {
  if (!inner) throw std::invalid_argument("ActivationCheckpoint: the module to wrap is null");
  inner_ = inner.get();
  add_module("", std::move(inner));
}

Tensor ActivationCheckpoint::forward(const Tensor& x) {
  x_ = Tensor();
  counters_.clear();
  if (!training()) {
    saved_ = Saved::passthrough;
    return inner_->forward(x);
  }
  saved_ = Saved::none;  // until the forward below has succeeded
  std::map<std::string, uint64_t> before = inner_->counters();
  Tensor y = inner_->forward(x);
  inner_->release_activations();  // y stays alive: the caller holds it
  x_ = x;
  counters_ = std::move(before);
  saved_ = Saved::checkpointed;
  return y;
}

Tensor ActivationCheckpoint::backward(const Tensor& dy) {
  check_saved(kind(), saved_ != Saved::none);
  const Saved saved = saved_;
  saved_ = Saved::none;
  InputGradScope input_grad(*inner_, needs_input_grad_);
  if (saved == Saved::passthrough) return backward_child(*inner_, dy);

  // Recompute: the counters of the first forward (the same Dropout masks), and the buffers
  // as they are now, written back after it (the step already updated them once).
  const std::map<std::string, uint64_t> after = inner_->counters();
  set_counters(*inner_, counters_);
  std::vector<ModuleBuffer*> buffers = inner_->buffers();
  std::vector<Tensor> kept;
  kept.reserve(buffers.size());
  for (const ModuleBuffer* b : buffers) kept.push_back(b->value.clone());
  inner_->forward(x_);  // the output equals the first forward's and nobody reads it
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i]->value.copy_from(kept[i]);
  set_counters(*inner_, after);

  Tensor dx = backward_child(*inner_, dy);  // reports the module's own parameters once
  inner_->release_activations();             // dx stays alive: it is returned
  x_ = Tensor();
  counters_.clear();
  return dx;
}

void ActivationCheckpoint::release_activations() {
  saved_ = Saved::none;
  x_ = Tensor();
  counters_.clear();
  Module::release_activations();
}

}  // namespace tandem
