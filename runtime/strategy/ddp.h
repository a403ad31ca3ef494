// DistributedDataParallel: one process per device, each holding a full replica; the
// Reducer all-reduces gradient buckets while backward is still running.
//
// Construction checks that every rank registered the same parameters (names, shapes,
// dtypes; a mismatch names the first differing parameter and the ranks that differ)
// and broadcasts rank 0's values, so replicas start identical whatever their seeds.
// With --grad-accum K, the first K-1 micro-batches run backward with the reducer
// detached (gradients accumulate locally in the bucket views), and the K-th
// synchronises: the result equals one K-times larger batch. Under no_sync
// (Strategy::NoSync) every micro-batch runs detached and nothing is reduced; the next
// synchronising call's last micro-batch reduces everything accumulated.
// Uneven inputs (set_uneven_inputs, runtime/strategy/strategy.h's UnevenInputs): under
// join a rank that ran out of batches calls forward_backward with none and reduces zeros
// bucket by bucket, so every rank issues the same collectives; the others weight their
// gradients by their share of the step's samples, so the result is the mean over the
// samples seen. ZeRO and comm hooks are unaffected: they see buckets as usual.
// Buffers (runtime/module.h) start as rank 0's and, while broadcast_buffers is on (the
// default), are rank 0's again after every synchronising forward_backward: one coalesced
// broadcast after the reducer's last bucket. With sync_batchnorm every BatchNorm sums its
// statistics over the group (the order of these collectives: runtime/strategy/replica_sync.h).
// With reducer_options.zero_stage = 1 (ZeRO-1, runtime/strategy/zero.h) the optimizer
// state is sharded: gradients are reduce-scattered, each rank updates its shard and the
// parameters are all-gathered. After forward_backward only this rank's shard of the
// gradients is averaged (the rest is unspecified), and model() waits for the gathers.
#pragma once

#include <memory>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/strategy/reducer.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/strategy/zero.h"

namespace tandem {

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device,
              std::shared_ptr<ProcessGroup> group, ReducerOptions reducer_options, Tracer* tracer = nullptr,
              const LossFactory& make_loss = {});
  const char* mode() const override { return "ddp"; }
  int replicas() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  std::string backend() const override { return group_->backend_name(); }

  using Strategy::forward_backward;  // the overloads without phase times
  using Strategy::step;
  StepOutput forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) override;
  void step(float lr, PhaseTimes& times) override;
  EvalResult evaluate(BatchSource& loader) override;
  double global_loss(double local_loss) override;
  Model& model() override;
  Optimizer& optimizer() override { return zero_ ? zero_->optimizer() : *optimizer_; }
  void with_full_optimizer(FullState access, const std::function<void(Optimizer&)>& fn) override;
  int zero_stage() const override { return zero_ ? 1 : 0; }
  bool replicas_identical() override;
  std::vector<BucketInfo> buckets() const override { return reducer_->bucket_info(); }
  std::vector<GradReadyInfo> grad_ready() const override { return reducer_->grad_ready(); }
  std::optional<BucketCaps> bucket_caps() const override {
    return BucketCaps{reducer_->bucket_cap_bytes(), reducer_->first_bucket_cap_bytes(), reducer_->auto_choice()};
  }
  std::optional<PowerSgdSummary> powersgd() const override;
  bool comm_hook_stateful() const override { return reducer_->powersgd() != nullptr; }
  TensorFile comm_hook_state() override;
  void load_comm_hook_state(const std::string& path, uint32_t crc32) override;
  void barrier() override;
  std::vector<int64_t> per_rank(int64_t local) override;
  // The training loss gets this rank's group; evaluation, where every rank runs the whole
  // set, gets one built with a null group (a single process's loss).
  void set_loss(const LossFactory& make_loss) override;
  // Rank 0's buffers to every rank after each step (default on).
  void set_broadcast_buffers(bool on) { broadcast_buffers_ = on; }
  bool broadcast_buffers() const { return broadcast_buffers_; }
  // SyncBatchNorm over this group (throws under UnevenInputs::join: a rank without data
  // would skip the statistics all-reduces the others wait in). Returns the layers synced.
  int set_sync_batchnorm(bool on);
  void set_uneven_inputs(UnevenInputs policy) override;
  Reducer& reducer() { return *reducer_; }
  ZeroShards* zero() { return zero_.get(); }  // null unless ZeRO

 private:
  void check_parameters_match();
  StepOutput shadow_backward(PhaseTimes& times);
  void broadcast_parameters();
  void sync_buffers();  // the per-step buffer broadcast, when on

  std::unique_ptr<Model> model_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Optimizer> optimizer_;  // null under ZeRO (zero_ holds the sharded one)
  std::unique_ptr<ZeroShards> zero_;
  std::unique_ptr<Loss> loss_, eval_loss_;
  Device device_;
  Tracer* tracer_;
  bool sync_ = false;
  bool broadcast_buffers_ = true;
  bool sync_batchnorm_ = false;
  int64_t steps_seen_ = 0;  // forward_backward calls under an uneven-inputs policy (for its message)
};

// FNV-1a 64 of a parameter's name, dtype and shape: equal on two ranks when they
// registered the same parameter.
uint64_t parameter_signature(const Parameter& p);

}  // namespace tandem
