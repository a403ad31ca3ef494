// Strategy: everything mode-specific about a training step. The loop in
// train/trainer.cpp is the same in every mode: batch -> forward_backward -> step ->
// log. Single, DataParallel and DistributedDataParallel differ only here, which is what
// makes --mode a flag and not three programs (docs/architecture.md).
//
// Invariant: after forward_backward() returns, model().parameters()' gradients are the
// gradients of the mean loss over the GLOBAL batch (all replicas), so step() gives
// every mode the same update. The loss is the user's (runtime/layers/loss.h): each
// replica's loss returns a sum of row losses and its rows, and the strategy scales the
// gradient by 1 / rows, so replicas combine weighted by rows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/data/loader.h"
#include "tandem/runtime/kernels.h"
#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/layers/metric.h"
#include "tandem/runtime/model.h"
#include "tandem/runtime/phase_times.h"
#include "tandem/runtime/strategy/powersgd.h"
#include "tandem/runtime/optim/optimizer.h"

namespace tandem {

// A step's loss: the mean over this process's share of the global batch. On a device
// its parts are read after the step is queued (loss() waits for them), so reading it
// never stops the device mid-step.
class StepOutput {
 public:
  StepOutput() = default;
  explicit StepOutput(double loss) : known_(loss) {}
  // Uneven inputs (UnevenInputs::join): no rank had a batch, so nothing was computed and
  // the loop is over (on every rank at the same step).
  static StepOutput finished() {
    StepOutput out;
    out.finished_ = true;
    return out;
  }
  bool done() const { return finished_; }
  // One micro-batch: the sum of its `rows` row losses.
  void add(LossSum sum) { add(std::move(sum.sum), sum.rows); }
  void add(std::shared_ptr<Kernels::PendingValue> sum, int64_t rows) { parts_.push_back({std::move(sum), rows}); }
  // The mean over rows of each micro-batch, averaged over the micro-batches.
  double loss() const {
    if (parts_.empty()) return known_;
    double total = 0;
    for (const auto& [sum, rows] : parts_) total += rows == 0 ? 0.0 : sum->get() / static_cast<double>(rows);
    return total / static_cast<double>(parts_.size());
  }

 private:
  double known_ = 0;
  bool finished_ = false;
  std::vector<std::pair<std::shared_ptr<Kernels::PendingValue>, int64_t>> parts_;
};

// What DDP does when ranks hold different numbers of batches (PyTorch's Join). A rank out
// of data calls forward_backward with no micro-batches (and then step, as the others do).
enum class UnevenInputs : uint8_t {
  // Every rank must call forward_backward with batches equally often (a rank that stops
  // early leaves the others in a collective until its timeout). No extra communication.
  off,
  // Each step first exchanges every rank's sample count (one small all-gather). A rank
  // without batches takes part in the gradient reduction with zeros, so the gradients are
  // the mean over the samples actually seen in that step; once no rank has a batch,
  // forward_backward returns StepOutput::finished() on every rank.
  join,
  // The same exchange, but the first step in which some rank has no batch while others do
  // throws std::runtime_error on every rank, naming the ranks that ran out.
  throw_on_early_termination,
};
const char* uneven_inputs_str(UnevenInputs u);

// evaluate()'s figures: the loss's mean over every evaluated row and each metric's value,
// in the order the metrics were given.
struct EvalResult {
  double loss = 0;
  int64_t samples = 0;  // rows
  std::vector<std::pair<std::string, double>> metrics;
  // The metric named `name`, or nullopt when none has that name.
  std::optional<double> metric(std::string_view name) const {
    for (const auto& [key, value] : metrics)
      if (key == name) return value;
    return std::nullopt;
  }
};

// What a loss factory is given for each replica it builds a loss for.
struct LossContext {
  std::shared_ptr<ProcessGroup> group;  // ddp: the strategy's process group; null in single and dp
  Device device = Device::cpu();        // the replica's device
};
using LossFactory = std::function<std::unique_ptr<Loss>(const LossContext&)>;
using MetricsFactory = std::function<Metrics()>;

struct BucketInfo {
  int64_t bytes = 0;
  int64_t parameters = 0;
  // Mean time from launch to completion on this rank, over the synchronised steps after
  // the first (waiting for late peers included); 0 before any. The job's own all-reduce
  // times, which tandem-plan can fit its cost line to.
  double comm_ms = 0;
};

// DDP's bucket caps in force, and what --bucket-cap-mb auto chose and why (ReducerOptions::
// auto_buckets_after): the exposed communication the cost model predicted with the chosen
// caps and with the caps before, and the all-reduces it timed on the group.
struct AutoBucketChoice {
  size_t bucket_cap_bytes = 0, first_bucket_cap_bytes = 0;
  double predicted_exposed_ms = 0;
  double default_exposed_ms = 0;
  std::vector<std::pair<int64_t, double>> probe;  // (bytes, ms)
  // Measured forward + backward + the wait for gradients, per step: with the caps before
  // (the steps the choice was made on), and in the trial of the chosen caps (unset when
  // the cut did not change, so nothing was tried); kept: the trial was no slower.
  double before_ms = 0;
  std::optional<double> trial_ms;
  bool kept = true;
};
struct BucketCaps {
  size_t bucket_cap_bytes = 0, first_bucket_cap_bytes = 0;
  std::optional<AutoBucketChoice> chosen;  // set once --bucket-cap-mb auto chose
};

// A gradient's place in backward, as the cost model takes it (runtime/plan/cost_model.h):
// when it became ready, in milliseconds after the synchronising micro-batch began (its
// forward included), averaged over the synchronised backwards after the first.
struct GradReadyInfo {
  std::string name;
  int64_t bytes = 0;
  double ready_ms = 0;
};

// What with_full_optimizer's function does with the full state.
enum class FullState {
  read,   // reads it (saving a checkpoint)
  write,  // fills it (loading a checkpoint); it then replaces the strategy's state
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // While a NoSync lives (Strategy::no_sync, PyTorch's DDP.no_sync), forward_backward leaves
  // the gradients unreduced and does not zero them: each call ADDS its mean-loss gradients
  // locally, with no communication. The first forward_backward after the scope ends adds its
  // own and then synchronises the sum (DDP: all-reduced as usual), so the result is the SUM of
  // every call's gradients, reduced once. step() inside the scope is an error.
  class NoSync {
   public:
    explicit NoSync(Strategy& s) : s_(&s) { ++s_->no_sync_depth_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    ~NoSync() { --s_->no_sync_depth_; }

   private:
    Strategy* s_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  bool syncing() const { return no_sync_depth_ == 0; }
  virtual const char* mode() const = 0;   // "single", "dp", "ddp"
  virtual int replicas() const = 0;       // 1, DP devices, or DDP world size
  virtual int rank() const { return 0; }  // this process's rank (DDP)
  virtual std::string backend() const { return "none"; }

  // This process's share of the global batch, as K micro-batches (--grad-accum K):
  // forward, loss and backward of each, gradients accumulated, then synchronised.
  virtual StepOutput forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) = 0;
  virtual void step(float lr, PhaseTimes& times) = 0;
  // The same for a loop of your own that keeps no phase times: one batch (or the
  // micro-batches of one step), then the update.
  StepOutput forward_backward(std::span<const Batch> micro_batches) {
    PhaseTimes times;
    return forward_backward(micro_batches, times);
  }
  StepOutput forward_backward(const Batch& batch) { return forward_backward(std::span<const Batch>(&batch, 1)); }
  void step(float lr) {
    PhaseTimes times;
    step(lr, times);
  }
  // The loss's mean over every row the loader yields and each metric's value (the model in
  // evaluation mode; it is back in training mode after).
  virtual EvalResult evaluate(BatchSource& loader) = 0;

  // Mean of every replica's local loss (a collective in DDP: call on every rank).
  virtual double global_loss(double local_loss) { return local_loss; }
  // Waits for every rank (DDP); nothing elsewhere.
  virtual void barrier() {}
  // Every process's `local` value, by rank (a collective in DDP: call on every rank);
  // {local} where one process holds every replica.
  virtual std::vector<int64_t> per_rank(int64_t local) { return {local}; }

  virtual Model& model() = 0;  // the replica holding the result (rank's / device 0's)
  // Restores layer counters (Model::counters) on every replica this process holds.
  virtual void set_counters(const std::map<std::string, uint64_t>& counters) { model().set_counters(counters); }
  virtual Optimizer& optimizer() = 0;
  // Calls fn with an optimizer in a plain run's layout (every parameter's full state, the
  // layout checkpoints hold): optimizer() itself, except under ZeRO (zero_stage() > 0),
  // where the state is sharded across ranks: then fn gets a full copy, gathered from
  // every rank for `read`, zeroed for `write` and scattered back into the shards after fn
  // returns. A collective under ZeRO: call it on every rank.
  virtual void with_full_optimizer(FullState access, const std::function<void(Optimizer&)>& fn) { fn(optimizer()); }
  // 1 when each rank holds only its shard of the optimizer state (ZeRO-1), else 0.
  virtual int zero_stage() const { return 0; }
  // True when every replica holds bit-identical parameters (DDP all-gathers checksums).
  virtual bool replicas_identical() { return true; }
  virtual std::vector<BucketInfo> buckets() const { return {}; }
  // DDP: every communicated gradient, in the order backward last produced them.
  virtual std::vector<GradReadyInfo> grad_ready() const { return {}; }
  // DDP: the caps in force (std::nullopt outside DDP).
  virtual std::optional<BucketCaps> bucket_caps() const { return std::nullopt; }
  // DDP with --comm-hook powersgd: its settings, the gate's decision and step count.
  virtual std::optional<PowerSgdSummary> powersgd() const { return std::nullopt; }
  // A comm hook that carries state from step to step (PowerSGD's error feedback and
  // warm-start matrices), which checkpoints must hold for a resume to continue bit for bit.
  virtual bool comm_hook_stateful() const { return false; }
  // Its state for a checkpoint (comm_hook.safetensors): a collective when stateful, every
  // rank calls it and rank 0's is complete. Empty when not stateful.
  virtual TensorFile comm_hook_state() { return {}; }
  // Restores this rank's part from a checkpoint's comm_hook.safetensors at `path`, which
  // the checkpoint's meta.json records with `crc32` (verified: CheckpointError otherwise).
  virtual void load_comm_hook_state(const std::string& /*path*/, uint32_t /*crc32*/) {}
  // The loss and metrics each replica uses (ParallelOptions::loss and ::metrics); the
  // defaults are softmax cross-entropy and {accuracy}. The loss must be set before the
  // first forward_backward; a strategy holding several replicas builds one loss per replica.
  virtual void set_loss(const LossFactory& make_loss) = 0;
  // Uneven inputs (DDP; runtime/strategy/ddp.h). Where one process holds every replica
  // there is nothing to match: forward_backward with no micro-batches returns
  // StepOutput::finished() under any policy.
  virtual void set_uneven_inputs(UnevenInputs policy) { uneven_ = policy; }
  UnevenInputs uneven_inputs() const { return uneven_; }
  void set_metrics(MetricsFactory make_metrics) { make_metrics_ = std::move(make_metrics); }

 protected:
  // Whether this forward_backward starts from zero gradients (false after a no_sync call).
  bool begin_accumulation() {
    const bool fresh = !accumulating_;
    accumulating_ = !syncing();
    return fresh;
  }
  void check_not_accumulating(const char* what) const {
    if (accumulating_)
      throw std::logic_error(std::string(what) +
                             ": the gradients were accumulated under no_sync and not yet synchronised; run one "
                             "forward_backward outside the no_sync scope first");
  }
  Metrics make_metrics() const { return make_metrics_ ? make_metrics_() : default_metrics(); }
  UnevenInputs uneven_ = UnevenInputs::off;

 private:
  int no_sync_depth_ = 0;
  bool accumulating_ = false;  // a no_sync forward_backward left gradients to add to
  MetricsFactory make_metrics_;
};

}  // namespace tandem
