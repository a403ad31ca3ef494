// SGD and AdamW: thin drivers over the fused device kernels (runtime/kernels.h). Every
// step hands each device the whole list of its ranges at once (the multi-tensor calls:
// one launch for a GPT's ~80 tensors on CUDA, the same per-tensor loop on the CPU).
#include "runtime/optim/optimizer.h"

#include <cmath>
#include <numbers>
#include <vector>
#include <stdexcept>

#include "runtime/kernels.h"

namespace tandem {

namespace {
std::vector<Parameter*> trainable(std::vector<Parameter*> params) {
  std::erase_if(params, [](const Parameter* p) { return !p->requires_grad; });
  return params;
}

// f(kernels, first, count) for each run of consecutive entries on one device.
template <typename F>
void by_device(const std::vector<Device>& devices, F&& f) {
  for (size_t first = 0; first < devices.size();) {
    size_t end = first + 1;
    while (end < devices.size() && devices[end] == devices[first]) ++end;
    f(kernels_for(devices[first]), first, static_cast<int64_t>(end - first));
    first = end;
  }
}
}  // namespace

Optimizer::Optimizer(OptimizerConfig config, std::vector<Parameter*> params)
    : config_(config), params_(trainable(std::move(params))) {
  for (size_t i = 0; i < params_.size(); ++i) ranges_.push_back({i, 0, params_[i]->value.numel()});
}

Optimizer::Optimizer(OptimizerConfig config, std::vector<Parameter*> params, std::vector<ParamRange> ranges)
    : config_(config), params_(std::move(params)), ranges_(std::move(ranges)), sharded_(true) {
  for (const ParamRange& r : ranges_)
  {
    if (r.param >= params_.size() || r.first < 0 || r.count < 0 || r.first + r.count > params_[r.param]->value.numel())
      throw std::invalid_argument("optimizer: a range outside its parameter");
    if (!params_[r.param]->requires_grad)
      throw std::invalid_argument("optimizer: a range of frozen parameter '" + params_[r.param]->name +
                                  "' (frozen parameters are not optimized)");
  }
}

void Optimizer::add_slot(const std::string& slot) {
  slot_names_.push_back(slot);
  std::vector<Tensor> tensors;
  if (!sharded_) {
    for (Parameter* p : params_) tensors.push_back(Tensor::zeros(p->value.shape(), DType::f32, p->value.device()));
  } else {
    // One flat tensor per slot; each range's state a view into it.
    int64_t total = 0;
    for (const ParamRange& r : ranges_) total += r.count;
    const Device device = params_.empty() ? Device::cpu() : params_[0]->value.device();
    Tensor flat = Tensor::zeros({total}, DType::f32, device);
    int64_t at = 0;
    for (const ParamRange& r : ranges_) {
      tensors.push_back(flat.view(at, {r.count}));
      at += r.count;
    }
  }
  slots_.push_back(std::move(tensors));
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& slot : slots_)
    for (const Tensor& t : slot) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void Optimizer::step(float lr) {
  if (config_.clip_grad_norm > 0.0f) clip_gradients();
  update(lr);
}

void Optimizer::set_norm_reduction(int64_t parts, int64_t part, std::function<void(Tensor& parts)> gather) {
  if (parts < 1 || part < 0 || part >= parts) throw std::invalid_argument("optimizer: norm part outside its parts");
  norm_count_ = parts;
  norm_part_ = part;
  gather_norm_ = std::move(gather);
  norm_parts_ = Tensor();
}

void Optimizer::clip_gradients() {
  // A sharded optimizer with no range still takes part in the norm's reduction.
  if (params_.empty()) return;
  const Device device = params_[0]->value.device();
  for (const Parameter* p : params_)
    if (!(p->grad.device() == device))
      throw std::logic_error("clip_grad_norm: parameters on " + device.str() + " and " + p->grad.device().str());
  Kernels& k = kernels_for(device);
  static_assert(sizeof(double) == sizeof(int64_t));
  if (!norm_parts_.defined() || !(norm_parts_.device() == device))
    norm_parts_ = Tensor::zeros({norm_count_}, DType::i64, device);
  double* parts = static_cast<double*>(norm_parts_.raw());
  k.fill(static_cast<float*>(norm_parts_.raw()), 2 * norm_count_, 0.0f);  // all bits zero: 0.0 in every part
  std::vector<Kernels::Span> grads;
  grads.reserve(ranges_.size());
  for (const ParamRange& r : ranges_) grads.push_back({params_[r.param]->grad.f32() + r.first, r.count});
  const auto count = static_cast<int64_t>(grads.size());
  k.sum_squares_acc_multi(parts + norm_part_, grads.data(), count);
  if (gather_norm_) gather_norm_(norm_parts_);
  k.clip_scale_multi(grads.data(), count, parts, norm_count_, config_.clip_grad_norm);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (sharded_)
    throw std::logic_error("the optimizer's state is sharded (ZeRO): this rank holds part of it only; "
                           "Strategy::with_full_optimizer gives every parameter's full state");
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i)
    for (size_t s = 0; s < slot_names_.size(); ++s)
      out.emplace_back(params_[i]->name + "." + slot_names_[s], slots_[s][i]);
  return out;
}

namespace {

class Sgd final : public Optimizer {
 public:
  template <typename... Ranges>
  Sgd(OptimizerConfig c, std::vector<Parameter*> p, Ranges&&... ranges)
      : Optimizer(c, std::move(p), std::forward<Ranges>(ranges)...) {
    if (config_.momentum != 0.0f) add_slot("momentum_buffer");
  }
  const char* name() const override { return "sgd"; }
  void update(float lr) override {
    std::vector<Kernels::UpdateSpan> spans;
    std::vector<Device> devices;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      const ParamRange& r = ranges_[i];
      Parameter& p = *params_[r.param];
      float* buf = config_.momentum != 0.0f ? slot(i, 0).f32() : nullptr;
      spans.push_back({p.value.f32() + r.first, buf, nullptr, p.grad.f32() + r.first, r.count, config_.weight_decay});
      devices.push_back(p.value.device());
    }
    by_device(devices, [&](Kernels& k, size_t first, int64_t count) {
      k.sgd_update_multi(spans.data() + first, count, lr, config_.momentum, config_.nesterov, steps_ == 0);
    });
    ++steps_;
  }
};

class AdamW final : public Optimizer {
 public:
  template <typename... Ranges>
  AdamW(OptimizerConfig c, std::vector<Parameter*> p, Ranges&&... ranges)
      : Optimizer(c, std::move(p), std::forward<Ranges>(ranges)...) {
    add_slot("exp_avg");
    add_slot("exp_avg_sq");
  }
  const char* name() const override { return "adamw"; }
  void update(float lr) override {
    ++steps_;
    std::vector<Kernels::UpdateSpan> spans;
    std::vector<Device> devices;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      const ParamRange& r = ranges_[i];
      Parameter& p = *params_[r.param];
      // By the parameter's shape, not the range's: a shard of a matrix is still decayed.
      const float decay = p.value.ndim() >= 2 ? config_.weight_decay : 0.0f;
      spans.push_back({p.value.f32() + r.first, slot(i, 0).f32(), slot(i, 1).f32(), p.grad.f32() + r.first, r.count,
                       decay});
      devices.push_back(p.value.device());
    }
    by_device(devices, [&](Kernels& k, size_t first, int64_t count) {
      k.adamw_update_multi(spans.data() + first, count, lr, config_.beta1, config_.beta2, config_.eps, steps_);
    });
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

std::unique_ptr<Optimizer> make_sharded_optimizer(const OptimizerConfig& config, std::vector<Parameter*> params,
                                                  std::vector<ParamRange> ranges) {
  switch (config.kind) {
    case OptimizerKind::sgd: return std::make_unique<Sgd>(config, std::move(params), std::move(ranges));
    case OptimizerKind::adamw: return std::make_unique<AdamW>(config, std::move(params), std::move(ranges));
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
