// ActivationCheckpoint: activation checkpointing (gradient checkpointing) of one module,
// as torch.utils.checkpoint. A training forward runs the wrapped module, keeps only its
// input (a reference) and has it drop everything else (Module::release_activations);
// backward runs the module's forward again from that input and then its backward. Memory
// for time: what the module saved is held only from its recompute to the end of its own
// backward, at the price of a second forward. In evaluation it is a plain pass-through.
//
// The wrapped module is a transparent sub-module (runtime/module.h): its parameters,
// buffers and counters keep their names ("blocks.0.attn.qkv.weight"), and the wrapper
// has none of its own.
//
// Invariant: the recompute computes exactly what the first forward did, and changes
// nothing the first forward did not.
//   - Counters (Dropout's forward count): restored to their values before the first
//     forward, so every Dropout draws the same masks; afterwards they are as they were
//     when backward began (as after the first forward).
//   - Buffers (BatchNorm's running statistics and num_batches_tracked): copied before the
//     recompute and written back bit for bit after it, so a step updates them once.
//   - Gradient-ready: the recompute is a forward, which reports nothing; the backward
//     reports each parameter once, as without the wrapper (backward_child).
//   - Collectives: the recompute calls the module's forward directly, never Model's
//     forward pre-hook (ZeRO's gather waits). A SyncBatchNorm inside the module issues its
//     statistics all-reduce again in the recompute; every rank recomputes the same layers
//     in the same order with the same values, so the extra collective matches on every
//     rank and returns the same sums as the first forward (which is correct, if not free).
// The training mode and precision must not change between a forward and its backward.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class ActivationCheckpoint final : public Module {
 public:
  explicit ActivationCheckpoint(std::unique_ptr<Module> inner);
  std::string kind() const override { return "ActivationCheckpoint(" + inner_->kind() + ")"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Drops the saved input and whatever the wrapped module holds.
  void release_activations() override;

  Module& inner() { return *inner_; }

 private:
  // none: nothing to differentiate; checkpointed: x_ and counters_ are the first
  // forward's; passthrough: an evaluation forward, whose backward is the module's own.
  enum class Saved { none, checkpointed, passthrough } saved_ = Saved::none;
  Module* inner_;
  Tensor x_;                                  // the wrapped module's input, shared with the caller
  std::map<std::string, uint64_t> counters_;  // the module's counters before its first forward
};

}  // namespace tandem
