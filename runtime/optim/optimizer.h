// Optimizers over a model's parameter registry: SGD (momentum, Nesterov, weight decay)
// and AdamW, with PyTorch's update rules, one fused kernel per parameter tensor on the
// parameter's device. State tensors are named "<param>.<slot>" so checkpoints key on
// parameter names with no mode prefix (docs/reference.md, "Checkpoints").
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/module.h"

namespace tandem {

enum class OptimizerKind { sgd, adamw };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  float momentum = 0.9f;      // sgd
  bool nesterov = false;      // sgd
  // sgd: L2 added to every gradient; adamw: decoupled, and only on parameters of two or
  // more dimensions (matrices, embeddings), never on biases or LayerNorm (nanoGPT's rule).
  float weight_decay = 0.0f;
  float beta1 = 0.9f;         // adamw
  float beta2 = 0.999f;       // adamw
  float eps = 1e-8f;          // adamw
  // Before each update, scale every gradient by min(1, clip / global L2 norm), as
  // torch.nn.utils.clip_grad_norm_; 0 turns it off. Computed on the device (no host read).
  float clip_grad_norm = 0.0f;
};

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, std::vector<Parameter*> params);
  virtual ~Optimizer() = default;

  // One update of every parameter from its current gradient, at learning rate lr (the
  // gradients clipped first when config().clip_grad_norm > 0).
  void step(float lr);
  virtual const char* name() const = 0;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // Named state tensors ("fc1.weight.momentum_buffer", ...), in parameter order. The
  // tensors are the live state: loading a checkpoint copies into them.
  std::vector<std::pair<std::string, Tensor>> state() const;
  const OptimizerConfig& config() const { return config_; }

 protected:
  virtual void update(float lr) = 0;
  void add_slot(const std::string& slot);  // one zeroed tensor per parameter
  Tensor& slot(size_t param_index, size_t slot_index) { return slots_[slot_index][param_index]; }

  OptimizerConfig config_;
  std::vector<Parameter*> params_;
  std::vector<std::string> slot_names_;
  std::vector<std::vector<Tensor>> slots_;  // [slot][param]
  int64_t steps_ = 0;

 private:
  void clip_gradients();
  Tensor norm_sq_;  // (1) on the parameters' device: the squared global norm
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<Parameter*> params);
OptimizerKind parse_optimizer_kind(const std::string& name);  // throws on unknown

// Linear warm-up from 0 to base_lr over warmup_steps, then cosine decay to min_lr at
// total_steps (constant min_lr after). warmup_steps = 0 starts at base_lr.
class LrSchedule {
 public:
  LrSchedule(float base_lr, int64_t warmup_steps, int64_t total_steps, float min_lr = 0.0f);
  float at(int64_t step) const;  // step counts from 0

 private:
  float base_lr_, min_lr_;
  int64_t warmup_, total_;
};

}  // namespace tandem
