// ZeRO stage 1 for DDP (docs/zero.md): the optimizer state sharded across the ranks,
// along the reducer's buckets.
//
// Each bucket's buffer is padded to a multiple of the world size W and cut into W equal
// shards; rank r owns elements [r*S, (r+1)*S) of every bucket. The padding (fewer than W
// elements, at the end) is all a shard can lack, so shards differ by less than W real
// elements. The reducer reduce-scatters the gradients (runtime/strategy/reducer.h), so after backward
// rank r holds its shard's averaged gradients. This class then:
//   - keeps optimizer state for the owned elements only: a sharded Optimizer over the
//     (parameter, element range) pieces of the shards (runtime/optim/optimizer.h);
//   - clips by the global norm: each rank's squared norm of its owned gradients, summed
//     in double, all-gathered and added in rank order, so every rank scales by the same
//     factor, and by the same float factor as a plain run's;
//   - updates the owned parameters in place, in one flat buffer per bucket that the
//     parameters are views into (as their gradients are views into the reducer's);
//   - all-gathers every bucket's parameter buffer in place at the end of step(), last
//     bucket first (it holds the first layers), and the next forward waits for each
//     bucket just before the first layer that reads it (Model's forward pre-hook).
//
// Frozen parameters (runtime/freeze.h) are in no bucket: never sharded, updated or
// gathered; every rank keeps the value DDP broadcast at construction.
//
// Invariants:
//   - every rank issues the same collectives in the same order: the norm's all-gather
//     before the update, then the gathers in reverse bucket order;
//   - a parameter is read only after its bucket's gather completed: by the pre-hook inside
//     forward once the first step showed that the model's forward calls it for every
//     bucket (else begin_forward waits for all), and by wait_all() everywhere else
//     (DdpStrategy's model(), evaluate(), checkpoints, the next step's update).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/module.h"
#include "tandem/runtime/optim/optimizer.h"
#include "tandem/runtime/strategy/reducer.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/trace.h"

namespace tandem {

class ZeroShards {
 public:
  // `params` in registration order (the reducer's indices); `buckets` its layouts. Rebinds
  // every parameter's value to a view into its bucket's parameter buffer.
  ZeroShards(std::vector<Parameter*> params, std::vector<BucketLayout> buckets, std::shared_ptr<ProcessGroup> group,
             const OptimizerConfig& config, std::chrono::milliseconds timeout, Tracer* tracer = nullptr);
  ~ZeroShards();

  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }

  // Before a step's forward: waits for every pending gather unless the model's forward
  // is known to wait per bucket.
  void begin_forward();
  // The model's forward pre-hook: waits for the buckets holding `module`'s parameters.
  void wait_for(Module& module);
  // After backward: the first time, records whether forward waited for every bucket;
  // adds the time spent waiting for gathers to `times`.
  void end_forward_backward(PhaseTimes& times);
  // Waits for every pending gather.
  void wait_all();
  // Whether the model's forward was seen to wait for every bucket through the pre-hook,
  // so the gathers overlap the next forward (false before the first forward_backward).
  bool waits_per_layer() const { return per_layer_; }
  // Clips, updates this rank's shard, and launches the gathers.
  void step(float lr);

  // The state as a plain optimizer holds it (every parameter's full slots), gathered from
  // every rank's shard (a collective: every rank calls it; the result is complete on
  // every rank). With gather = false, a zeroed one of the same layout (to load into).
  std::unique_ptr<Optimizer> full_optimizer(bool gather);
  // Takes this rank's shard (and steps_taken) from a plain optimizer's full state.
  void load_from(Optimizer& full);
  // Bytes of state a plain optimizer of these parameters holds (frozen ones hold none).
  int64_t full_state_bytes() const;

 private:
  struct Bucket {
    BucketLayout layout;
    Tensor params;  // (padded) the parameters' values, back to back
    int64_t lo = 0, hi = 0;  // this rank's owned real elements [lo, hi)
    std::shared_ptr<Work> gather;
    Tracer::Clock::time_point launched_at{};
  };
  void wait(size_t bucket);

  std::vector<Parameter*> params_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<ProcessGroup> group_;
  OptimizerConfig config_;
  std::chrono::milliseconds timeout_;
  Tracer* tracer_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<size_t> range_bucket_;  // per optimizer range: its bucket
  std::vector<int64_t> range_at_;     // per optimizer range: its first element in the bucket
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::unordered_map<const Module*, std::vector<size_t>> module_buckets_;
  std::vector<uint8_t> claimed_;  // buckets the pre-hook waited for in this forward
  bool checked_ = false;          // the first forward_backward has been observed
  bool per_layer_ = false;        // forward waits per bucket through the pre-hook
  double wait_ms_ = 0;            // host time waiting for gathers since the last report
};

}  // namespace tandem
