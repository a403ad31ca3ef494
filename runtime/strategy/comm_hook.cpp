// Built-in communication hooks.
#include "runtime/strategy/comm_hook.h"

#include <stdexcept>

#include "runtime/kernels.h"

namespace tandem {

CommHookKind parse_comm_hook(const std::string& name) {
  if (name == "none") return CommHookKind::none;
  if (name == "fp16") return CommHookKind::fp16;
  if (name == "bf16") return CommHookKind::bf16;
  throw std::invalid_argument("unknown comm hook '" + name + "' (expected none, fp16 or bf16)");
}

const char* comm_hook_str(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::none: return "none";
    case CommHookKind::fp16: return "fp16";
    case CommHookKind::bf16: return "bf16";
  }
  return "?";
}

static Buffer buffer_of(const Tensor& t) { return Buffer{t.raw(), t.numel(), t.dtype(), t.device()}; }

namespace {

class AverageHook final : public CommHook {
 public:
  std::shared_ptr<Work> launch(ProcessGroup& group, Tensor& flat) override {
    return group.allreduce(buffer_of(flat), ReduceOp::avg);
  }
  void finish(Tensor&) override {}
};

class CompressHook final : public CommHook {
 public:
  CompressHook(DType dtype, const Tensor& flat)
      : dtype_(dtype), half_(Tensor::empty(flat.shape(), dtype, flat.device())) {}
  std::shared_ptr<Work> launch(ProcessGroup& group, Tensor& flat) override {
    Kernels& k = kernels_for(flat.device());
    k.scale(flat.f32(), flat.numel(), 1.0f / static_cast<float>(group.size()));
    if (dtype_ == DType::f16)
      k.f32_to_f16(half_.data<uint16_t>(), flat.f32(), flat.numel());
    else
      k.f32_to_bf16(half_.data<uint16_t>(), flat.f32(), flat.numel());
    return group.allreduce(buffer_of(half_), ReduceOp::sum);
  }
  void finish(Tensor& flat) override {
    Kernels& k = kernels_for(flat.device());
    if (dtype_ == DType::f16)
      k.f16_to_f32(flat.f32(), half_.data<uint16_t>(), flat.numel());
    else
      k.bf16_to_f32(flat.f32(), half_.data<uint16_t>(), flat.numel());
  }

 private:
  DType dtype_;
  Tensor half_;
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook(CommHookKind kind, const Tensor& flat) {
  switch (kind) {
    case CommHookKind::none: return std::make_unique<AverageHook>();
    case CommHookKind::fp16: return std::make_unique<CompressHook>(DType::f16, flat);
    case CommHookKind::bf16: return std::make_unique<CompressHook>(DType::bf16, flat);
  }
  throw std::invalid_argument("unknown comm hook");
}

}  // namespace tandem
