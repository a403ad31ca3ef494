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

void Optimizer::step(float lr) {
  if (config_.clip_grad_norm > 0.0f) clip_gradients();
  update(lr);
}

void Optimizer::clip_gradients() {
  if (params_.empty()) return;
  const Device device = params_[0]->value.device();
  for (const Parameter* p : params_)
    if (!(p->grad.device() == device))
      throw std::logic_error("clip_grad_norm: parameters on " + device.str() + " and " + p->grad.device().str());
  Kernels& k = kernels_for(device);
  if (!norm_sq_.defined() || !(norm_sq_.device() == device)) norm_sq_ = Tensor::zeros({1}, DType::f32, device);
  k.fill(norm_sq_.f32(), 1, 0.0f);
  for (const Parameter* p : params_) k.sum_squares_acc(norm_sq_.f32(), p->grad.f32(), p->grad.numel());
  for (const Parameter* p : params_) k.clip_scale(p->grad.f32(), p->grad.numel(), norm_sq_.f32(), config_.clip_grad_norm);
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
  void update(float lr) override {
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
  void update(float lr) override {
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      const float decay = p.value.ndim() >= 2 ? config_.weight_decay : 0.0f;
      kernels_for(p.value.device())
          .adamw_update(p.value.f32(), slot(i, 0).f32(), slot(i, 1).f32(), p.grad.f32(),
                        p.value.numel(), lr, config_.beta1, config_.beta2, config_.eps, decay, steps_);
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
