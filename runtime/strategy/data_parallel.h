// DataParallel: one process drives N devices, following torch.nn.DataParallel's
// algorithm step by step so the comparison with DDP is honest:
//   1 broadcast parameters and buffers from device 0 to the replicas
//   2 scatter the global batch (contiguous chunks)
//   3 forward on every replica in parallel
//   4 gather the outputs to device 0 and compute the loss there (each of several outputs
//     gathered along its rows; the loss sees the whole batch, weighted by rows)
//   5 scatter the output gradients
//   6 backward on every replica in parallel
//   7 reduce-add the gradients onto device 0
//   8 step the optimizer on device 0
// On the CPU each "device" is a worker thread with single-threaded BLAS.
// Invariant: replica 0's model is the result; the others are overwritten every step.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/strategy/replica_sync.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/thread_pool.h"

namespace tandem {

class DataParallelStrategy final : public Strategy {
 public:
  // `replicas` are N identically built models (replica 0 is the master).
  DataParallelStrategy(std::vector<std::unique_ptr<Model>> replicas, const OptimizerConfig& optim,
                       std::vector<Device> devices, const LossFactory& make_loss = {});
  const char* mode() const override { return "dp"; }
  int replicas() const override { return static_cast<int>(replicas_.size()); }
  using Strategy::forward_backward;  // the overloads without phase times
  using Strategy::step;
  StepOutput forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) override;
  void step(float lr, PhaseTimes& times) override;
  EvalResult evaluate(BatchSource& loader) override;
  Model& model() override { return *replicas_[0]; }
  void set_counters(const std::map<std::string, uint64_t>& counters) override {
    for (auto& r : replicas_) r->set_counters(counters);
  }
  Optimizer& optimizer() override { return *optimizer_; }
  void set_loss(const LossFactory& make_loss) override;
  // SyncBatchNorm over the replicas (each waits `timeout` at most for the others); off:
  // each replica's BatchNorm sees its chunk only, and device 0's buffers are the result.
  // Returns the BatchNorm layers of one replica.
  int set_sync_batchnorm(bool on, std::chrono::milliseconds timeout = std::chrono::minutes(10));

 private:
  // Runs fn on every replica's thread; a replica that throws cancels the cross-replica
  // sum, so the others do not wait in it for their timeout.
  void run_replicas(const std::function<void(int)>& fn);

  void broadcast_parameters();
  void reduce_add_gradients();

  std::vector<std::unique_ptr<Model>> replicas_;
  std::vector<Device> devices_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;  // device 0's, over the gathered batch
  ThreadPool pool_;
  std::shared_ptr<ThreadCrossReplicaSum> sync_;  // null unless SyncBatchNorm
};

}  // namespace tandem
