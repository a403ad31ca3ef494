// Optimizers over a model's parameter registry: SGD (momentum, Nesterov, weight decay)
// and AdamW, with PyTorch's update rules, one fused kernel per parameter tensor on the
// parameter's device. State tensors are named "<param>.<slot>" so checkpoints key on
// parameter names with no mode prefix (docs/reference.md, "Checkpoints").
//
// An optimizer may also update only some element ranges of its parameters (ZeRO-1's
// shard of each DDP bucket, runtime/strategy/zero.h): its state then covers exactly those
// ranges, back to back in one flat tensor per slot. The updates are elementwise, so a
// range gets bit for bit the update the whole tensor would; AdamW decays a range when its
// parameter has two or more dimensions, as it decays the whole tensor.
//
// Frozen parameters (Parameter::requires_grad false when the optimizer is built,
// runtime/freeze.h) are left out: no state slot, no update (not even weight decay), no
// part in the clipping norm, and no "<param>.<slot>" in state(), so a checkpoint of a
// run with frozen parameters has no optimizer state for them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/runtime/module.h"

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

// Elements [first, first + count) of the optimizer's parameter `param` (an index into
// its parameter list), as the flat row-major order of the tensor numbers them.
struct ParamRange {
  size_t param = 0;
  int64_t first = 0;
  int64_t count = 0;
};

class Optimizer {
 public:
  // Every element of every trainable parameter of `params` (frozen ones are dropped);
  // state tensors shaped as their parameters.
  Optimizer(OptimizerConfig config, std::vector<Parameter*> params);
  // Only `ranges` (a sharded optimizer): each slot is one flat f32 tensor holding the
  // ranges' state back to back, in the order given. Its state() cannot be named per
  // parameter and throws; Strategy::with_full_optimizer gives a checkpoint's layout.
  // `params` is kept as given (ranges index into it); a range of a frozen parameter
  // throws std::invalid_argument.
  Optimizer(OptimizerConfig config, std::vector<Parameter*> params, std::vector<ParamRange> ranges);
  virtual ~Optimizer() = default;

  // One update of every parameter from its current gradient, at learning rate lr (the
  // gradients clipped first when config().clip_grad_norm > 0).
  void step(float lr);
  virtual const char* name() const = 0;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // Named state tensors ("fc1.weight.momentum_buffer", ...), in parameter order. The
  // tensors are the live state: loading a checkpoint copies into them. Throws
  // std::logic_error for a sharded optimizer (its state covers some ranges only).
  std::vector<std::pair<std::string, Tensor>> state() const;
  const OptimizerConfig& config() const { return config_; }
  // The parameters ranges() index into: a plain optimizer's trainable ones, in the order
  // given (so range i is parameter i); a sharded optimizer's exactly as given.
  const std::vector<Parameter*>& parameters() const { return params_; }

  // The ranges this optimizer updates (whole parameters unless sharded), and for each
  // its slice of slot `slot_index` (count elements, f32).
  bool sharded() const { return sharded_; }
  const std::vector<ParamRange>& ranges() const { return ranges_; }
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  Tensor& slot(size_t range_index, size_t slot_index) { return slots_[slot_index][range_index]; }
  // Bytes of state this optimizer holds (every slot of every range).
  int64_t state_bytes() const;
  // Sharded optimizers: the global squared gradient norm as `parts` partial sums, one per
  // holder of some of the ranges (e.g. per rank). This optimizer adds its ranges' squares
  // into part `part` of a (parts) tensor of doubles on the parameters' device (8-byte
  // elements of dtype i64, their bits a double's: Tensor has no f64), the others zero;
  // `gather` fills in the other parts (an all-gather), and clipping adds them in index
  // order, in double. So the norm is the same on every holder, and as a whole-model
  // optimizer's up to double rounding (whose float square root it then nearly always
  // equals bit for bit).
  void set_norm_reduction(int64_t parts, int64_t part, std::function<void(Tensor& parts)> gather);

 protected:
  virtual void update(float lr) = 0;
  void add_slot(const std::string& slot);  // zeroed state for every range

  OptimizerConfig config_;
  std::vector<Parameter*> params_;
  std::vector<ParamRange> ranges_;
  bool sharded_ = false;
  std::vector<std::string> slot_names_;
  std::vector<std::vector<Tensor>> slots_;  // [slot][range]
  int64_t steps_ = 0;

 private:
  void clip_gradients();
  Tensor norm_parts_;  // (norm_count_) doubles on the parameters' device: the squared norm's parts
  int64_t norm_count_ = 1, norm_part_ = 0;
  std::function<void(Tensor&)> gather_norm_;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<Parameter*> params);
// An optimizer of `ranges` of `params` only (ZeRO-1's shard).
std::unique_ptr<Optimizer> make_sharded_optimizer(const OptimizerConfig& config, std::vector<Parameter*> params,
                                                  std::vector<ParamRange> ranges);
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
