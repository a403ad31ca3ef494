// Dropout: inverted dropout, as torch.nn.Dropout(p): in training each element is kept
// with probability 1-p and scaled by 1/(1-p); in eval (or with p == 0) it is the identity.
// Invariant: the mask of the t-th training forward depends only on (seed, t, element
// index), so a run is reproducible and CPU and CUDA draw the same masks, while
// successive steps still draw different ones.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class Dropout final : public Module {
 public:
  Dropout(float p, uint64_t seed);
  std::string kind() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

  float p() const { return p_; }
  // Training forwards so far; the next one draws its mask from mask_seed(calls()).
  uint64_t calls() const { return calls_; }
  // Restores the counter (a resumed run continues the same mask sequence).
  void set_calls(uint64_t calls) { calls_ = calls; }
  std::map<std::string, uint64_t> counters() const override { return {{"calls", calls_}}; }
  void set_counter(const std::string& name, uint64_t value) override {
    if (name != "calls") Module::set_counter(name, value);
    calls_ = value;
  }
  // The kernel seed of the t-th training forward (t counts from 0).
  uint64_t mask_seed(uint64_t t) const;

 private:
  float p_;
  uint64_t seed_;
  uint64_t calls_ = 0;
  enum class Saved { none, identity, mask } saved_ = Saved::none;
  Shape y_shape_;
  Tensor mask_;  // 0 or 1/(1-p), layer-owned and reused across steps
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
