// Built-in communication hooks.
#include "runtime/strategy/comm_hook.h"

#include <stdexcept>

#include "runtime/allocator.h"
#include "runtime/cuda_device.h"
#include "runtime/kernels.h"
#include "runtime/host_collectives.h"

namespace tandem {

CommHookKind parse_comm_hook(const std::string& name) {
  if (name == "none") return CommHookKind::none;
  if (name == "fp16") return CommHookKind::fp16;
  if (name == "bf16") return CommHookKind::bf16;
  if (name == "powersgd") return CommHookKind::powersgd;
  throw std::invalid_argument("unknown comm hook '" + name + "' (expected none, fp16, bf16 or powersgd)");
}

const char* comm_hook_str(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::none: return "none";
    case CommHookKind::fp16: return "fp16";
    case CommHookKind::bf16: return "bf16";
    case CommHookKind::powersgd: return "powersgd";
  }
  return "?";
}


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

class StagedAverageHook final : public CommHook {
 public:
  explicit StagedAverageHook(const Tensor& flat) : bytes_(flat.nbytes()), count_(flat.numel()) {
    host_ = static_cast<float*>(cuda::alloc_pinned_host(bytes_));
  }
  ~StagedAverageHook() override {
    // An op that never completed (a timeout) may still be written into by the engine's
    // abandoned thread: its buffer is left to the process's exit rather than freed under it.
    if (last_ && !last_->is_completed()) return;
    cuda::free_pinned_host(host_);
  }
  std::shared_ptr<Work> launch(ProcessGroup& group, Tensor& flat) override {
    // Device-to-host copies return once the data has arrived (runtime/cuda_device.h).
    device_copy(host_, Device::cpu(), flat.raw(), flat.device(), bytes_);
    last_ = group.allreduce(cpu_buffer(host_, count_), ReduceOp::avg);
    return last_;
  }
  void finish(Tensor& flat) override { device_copy(flat.raw(), flat.device(), host_, Device::cpu(), bytes_); }

 private:
  size_t bytes_;
  int64_t count_;
  float* host_ = nullptr;
  std::shared_ptr<Work> last_;  // the op reading and writing host_
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook(CommHookKind kind, const Tensor& flat, bool direct) {
  if (!direct) {
    if (kind != CommHookKind::none)
      throw std::invalid_argument(std::string("--comm-hook ") + comm_hook_str(kind) +
                                  " needs a backend that reduces device buffers directly (nccl); this "
                                  "group stages GPU buckets through host memory");
    return std::make_unique<StagedAverageHook>(flat);
  }
  switch (kind) {
    case CommHookKind::none: return std::make_unique<AverageHook>();
    case CommHookKind::fp16: return std::make_unique<CompressHook>(DType::f16, flat);
    case CommHookKind::bf16: return std::make_unique<CompressHook>(DType::bf16, flat);
    case CommHookKind::powersgd:
      throw std::invalid_argument("the powersgd hook keeps state across buckets: the reducer builds it (PowerSgd)");
  }
  throw std::invalid_argument("unknown comm hook");
}

}  // namespace tandem
