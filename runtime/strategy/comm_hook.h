// Communication hooks: what a bucket's all-reduce does with its flat gradient buffer.
//   none:  all-reduce with average, in place, in f32.
//   fp16 / bf16: divide by the world size, cast to 16 bits, all-reduce sum, cast back
//          (PyTorch's fp16_compress_hook order: dividing first keeps sums in range).
//   staged: a GPU bucket over a host backend (mpi, gloo): copy to pinned host memory,
//          all-reduce average there, copy back.
// A hook is per bucket, so its compressed buffer is allocated once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// powersgd: low-rank factors (runtime/strategy/powersgd.h); the reducer builds its hooks.
enum class CommHookKind { none, fp16, bf16, powersgd };
CommHookKind parse_comm_hook(const std::string& name);  // throws naming accepted values
const char* comm_hook_str(CommHookKind kind);

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Starts the reduction of `flat` (the bucket's f32 gradients).
  virtual std::shared_ptr<Work> launch(ProcessGroup& group, Tensor& flat) = 0;
  // After the work of launch (or of the previous next) completed: starts the reduction's
  // next collective, or returns null when there is none (the default). The reducer calls
  // it for every bucket in bucket order, so every rank issues the stages alike.
  virtual std::shared_ptr<Work> next(ProcessGroup& /*group*/, Tensor& /*flat*/) { return nullptr; }
  // After the last work completed: leaves the averaged gradients in `flat`.
  virtual void finish(Tensor& flat) = 0;
};

// `direct`: the group takes `flat`'s device. Otherwise (CUDA tensors over mpi or gloo)
// the bucket is staged through pinned host memory: copied down, reduced on the host,
// copied back in finish(); compression hooks need a direct backend (nccl on a GPU).
std::unique_ptr<CommHook> make_comm_hook(CommHookKind kind, const Tensor& flat, bool direct = true);
// Builds a bucket's hook for its flat buffer; `direct` as above. A user's hook must leave
// the AVERAGE over ranks of every rank's `flat` in `flat` after finish(), issue the same
// collectives on every rank in the same order, and never reallocate `flat` (parameter
// gradients are views into it).
using CommHookFactory = std::function<std::unique_ptr<CommHook>(const Tensor& flat, bool direct)>;

}  // namespace tandem
