// BatchNorm: batch normalisation over the channel axis, as torch.nn.BatchNorm1d (x (N, C)
// or (N, C, L)) and torch.nn.BatchNorm2d (x (N, C, H, W)), and SyncBatchNorm when a
// CrossReplicaSum is set (runtime/cross_replica.h).
//   train:  y = (x - mean_B) / sqrt(var_B + eps) * weight + bias, mean_B and the biased
//           var_B over N and the spatial axes; running_mean and running_var move towards
//           mean_B and the unbiased var_B by `momentum`; num_batches_tracked counts them.
//   eval:   the same with running_mean and running_var.
// Parameters weight (C) = 1 and bias (C) = 0 when affine; buffers running_mean (C) = 0,
// running_var (C) = 1 and num_batches_tracked (i64, shape []) = 0: PyTorch's names,
// shapes and dtypes, so a state dict loads either way.
//
// Invariant: statistics are sums. Forward reduces each channel's (sum, sum of squares)
// and the count into one (2C + 1) f32 tensor; backward reduces (sum dy, sum dy*xhat)
// into one (2C). With a CrossReplicaSum both tensors are summed over every replica
// before use (one call each, forward and backward), so R replicas compute exactly what
// one replica computes on their concatenated batch, up to the order of the additions.
// Weight and bias gradients come from this replica's own sums (the reducer averages
// them, as any parameter's). Backward's sum is skipped with dx (needs_input_grad false),
// which every replica's copy of the model decides alike. The moments and the running
// statistics are derived from the sums on the device (Kernels::batchnorm_train_moments),
// so a CUDA forward never waits for the host. A training batch with one value per channel
// (N * spatial == 1, over every replica) throws std::invalid_argument, as PyTorch does; an
// empty one is refused as a shape error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/runtime/cross_replica.h"
#include "tandem/runtime/module.h"

namespace tandem {

enum class BatchNormKind : uint8_t { d1, d2 };  // BatchNorm1d, BatchNorm2d

struct BatchNormOptions {
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch
  bool affine = true;     // false: no weight and bias
};

class BatchNorm final : public Module {
 public:
  BatchNorm(BatchNormKind kind, int64_t channels, BatchNormOptions options = {});
  std::string kind() const override;  // "BatchNorm1d" | "BatchNorm2d"
  // 2d: x (N, C, H, W); 1d: x (N, C) or (N, C, L). y has x's shape.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // weight = 1, bias = 0, running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_parameters(uint64_t seed) override;
  void release_activations() override;

  // SyncBatchNorm: statistics over every replica (null: this replica's batch only). The
  // sums' messages name the layer by its buffers' prefix ("BatchNorm2d layer1.0.bn1
  // forward statistics").
  void set_sync(std::shared_ptr<CrossReplicaSum> sync) { sync_ = std::move(sync); }
  bool synced() const { return sync_ != nullptr; }
  int64_t channels() const { return channels_; }
  const BatchNormOptions& options() const { return options_; }

 private:
  BatchNormKind kind_;
  int64_t channels_;
  BatchNormOptions options_;
  std::shared_ptr<CrossReplicaSum> sync_;
  Parameter* weight_ = nullptr;        // (C), affine only
  Parameter* bias_ = nullptr;          // (C), affine only
  ModuleBuffer* running_mean_;         // (C)
  ModuleBuffer* running_var_;          // (C)
  ModuleBuffer* num_batches_tracked_;  // i64 []

  // "<kind> <prefix> <what>": what a CrossReplicaSum names in a timeout or failure.
  std::string sum_name(const char* what) const;

  // Saved by a training forward for backward (x_ defined <=> saved); layer-owned, reused.
  Tensor x_;              // the input, (N, C, S) in the kernels' view
  Tensor mean_, invstd_;  // (C) the batch's moments (the global batch's when synced)
  Tensor stats_;          // (2C + 1) [sum, sum of squares, count], summed over replicas when synced
  Tensor sums_;           // (2C) backward's [sum dy, sum dy*xhat]
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
