// SGD and AdamW: thin drivers over the fused device kernels (runtime/kernels.h).
#include "runtime/optim/optimizer.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "runtime/kernels.h"

namespace tandem {

Optimizer::Optimizer(OptimizerConfig config, std::vector<Parameter*> params)
    : config_(config), params_(std::move(params)) {}

void Optimizer::add_slot(const std::string& slot) {
  slot_names_.push_back(slot);
  std::vector<Tensor> tensors;
  for (Parameter* p : params_)
    tensors.push_back(Tensor::zeros(p->value.shape(), DType::f32, p->value.device()));
  slots_.push_back(std::move(tensors));
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i)
    for (size_t s = 0; s < slot_names_.size(); ++s)
      out.emplace_back(params_[i]->name + "." + slot_names_[s], slots_[s][i]);
  return out;
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(OptimizerConfig c, std::vector<Parameter*> p) : Optimizer(c, std::move(p)) {
    if (config_.momentum != 0.0f) add_slot("momentum_buffer");
  }
  const char* name() const override { return "sgd"; }
  void step(float lr) override {
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      float* buf = config_.momentum != 0.0f ? slot(i, 0).f32() : nullptr;
      kernels_for(p.value.device())
          .sgd_update(p.value.f32(), buf, p.grad.f32(), p.value.numel(), lr, config_.momentum,
                      config_.weight_decay, config_.nesterov, steps_ == 0);
    }
    ++steps_;
  }
};

class AdamW final : public Optimizer {
 public:
  AdamW(OptimizerConfig c, std::vector<Parameter*> p) : Optimizer(c, std::move(p)) {
    add_slot("exp_avg");
    add_slot("exp_avg_sq");
  }
  const char* name() const override { return "adamw"; }
  void step(float lr) override {
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      kernels_for(p.value.device())
          .adamw_update(p.value.f32(), slot(i, 0).f32(), slot(i, 1).f32(), p.grad.f32(),
                        p.value.numel(), lr, config_.beta1, config_.beta2, config_.eps,
                        config_.weight_decay, steps_);
    }
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<Parameter*> params) {
  switch (config.kind) {
    case OptimizerKind::sgd: return std::make_unique<Sgd>(config, std::move(params));
    case OptimizerKind::adamw: return std::make_unique<AdamW>(config, std::move(params));
  }
  throw std::invalid_argument("unknown optimizer kind");
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adamw") return OptimizerKind::adamw;
  throw std::invalid_argument("unknown optimizer '" + name + "' (expected sgd or adamw)");
}

LrSchedule::LrSchedule(float base_lr, int64_t warmup_steps, int64_t total_steps, float min_lr)
    : base_lr_(base_lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  if (warmup_ < 0 || total_ < 0) throw std::invalid_argument("LrSchedule: negative step count");
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_) return base_lr_ * static_cast<float>(step + 1) / static_cast<float>(warmup_);
  if (step >= total_ || total_ <= warmup_) return total_ <= warmup_ ? base_lr_ : min_lr_;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_lr_ + (base_lr_ - min_lr_) * cosine);
}

}  // namespace tandem
