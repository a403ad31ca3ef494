// Reducer: DDP's gradient buckets, whose all-reduce overlaps backward.
//
// Every parameter gradient is a view into one bucket's flat buffer (no copy between
// gradient and bucket). The buffer is the backend's shared buffer where it offers one
// (ProcessGroup::allocate_shared_buffer; shm: its peers reduce it where it lies). Buckets are cut in reverse registration order (the order
// backward produces gradients), at most `bucket_cap` bytes each, the first at most
// `first_bucket_cap` so the last layers' gradients start communicating early; a bucket
// never mixes dtypes or devices, and a parameter larger than the cap gets its own.
//
//   training thread:  bwd(L) mark.. bwd(L-1) mark.. [b0 full: launch] bwd(..) [b1 full: launch] .. finalize: wait all
//   comm thread:                                   [ allreduce b0 ]            [ allreduce b1 ]
//
// Invariants:
//   - buckets launch strictly in bucket order on every rank: a full bucket waits for
//     its predecessors, so every rank issues the same collectives in the same order;
//   - a parameter marked twice in one backward, or a bucket still missing parameters
//     when backward ends, is an error naming the parameters — never a hang;
//   - after the first synchronised backward the buckets are rebuilt in the order
//     gradients actually became ready on rank 0 (broadcast, so all ranks agree).
//   - a frozen parameter (requires_grad false when the reducer is built) is in no bucket
//     and never communicated; its ready mark is ignored and nothing waits for it. Every
//     rank must freeze the same parameters.
//
// ZeRO-1 (options.zero_stage = 1, docs/zero.md): each bucket's buffer is padded to a
// multiple of the world size W and reduce-scattered (average) instead of all-reduced, so
// after finalize_backward rank r holds the averaged gradients of its shard, elements
// [r*S, (r+1)*S) of every bucket (S = padded size / W), and the rest of the buffer is
// unspecified. The buckets are never rebuilt: the optimizer state is laid out along them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/module.h"
#include "tandem/runtime/strategy/comm_hook.h"
#include "tandem/runtime/strategy/powersgd.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/trace.h"

namespace tandem {

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_cap_bytes = 1u << 20;
  bool overlap = true;         // false: launch every bucket only when backward ends
  bool find_unused = false;    // true: parameters that got no gradient count as zero
  bool communicate = true;     // false (--no-comm): gradients stay local
  CommHookKind hook = CommHookKind::none;
  // A hook of the caller's own (a seam: runtime/strategy/comm_hook.h says what a hook
  // must do). When set, each bucket gets custom_hook(flat, direct) instead of `hook`.
  CommHookFactory custom_hook;
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // 1: reduce-scatter instead of all-reduce (ZeRO-1; no comm hooks, no rebuild). 0: off.
  int zero_stage = 0;
  // > 0: the caps above are chosen by the cost model (runtime/plan/cost_model.h) after this
  // many timed synchronised backwards (the first is not timed): every rank times a few
  // all-reduces on the group, rank 0 simulates its measured backward with each candidate
  // cap and first cap and broadcasts the fastest, and the buckets are cut again. 0: fixed.
  int auto_buckets_after = 0;
  // hook == powersgd: its settings (runtime/strategy/powersgd.h). With the model's gate,
  // the reducer decides which buckets to compress once it has timed two synchronised
  // backwards and the next step reaches start_step (reducer_powersgd.cpp).
  PowerSgdOptions powersgd;
};


// One bucket as ZeRO lays its shards along it.
struct BucketLayout {
  std::vector<size_t> params;    // parameter indices, in bucket order
  std::vector<int64_t> offsets;  // element offset of each in the bucket
  int64_t numel = 0;             // elements of the parameters
  int64_t padded = 0;            // elements of the buffer: numel rounded up to a multiple of W under ZeRO
};

class Reducer {
 public:
  Reducer(std::vector<Parameter*> params, std::shared_ptr<ProcessGroup> group, ReducerOptions options,
          Tracer* tracer = nullptr);
  ~Reducer();

  // Called before a synchronised backward: clears ready marks.
  void prepare_for_backward();
  // The model's on_grad_ready hook. Marks the parameter; launches buckets that are full.
  void mark_ready(Parameter& param);
  // After backward: launches what is left (treating unused parameters as zero when
  // find_unused is on, else throwing), waits for every bucket, and leaves averaged
  // gradients in every Parameter::grad. Adds comm and exposed-comm time to `times`.
  void finalize_backward(PhaseTimes& times);

  std::vector<BucketInfo> bucket_info() const;
  // Each communicated gradient in the last backward's ready order, with its mean ready
  // time (see GradReadyInfo); empty before the second synchronised backward.
  std::vector<GradReadyInfo> grad_ready() const;
  // Parameter indices (registration order) of each bucket, in launch order; frozen
  // parameters appear in none.
  std::vector<std::vector<size_t>> bucket_layout() const;
  // Each bucket's parameters, offsets and sizes, in launch order.
  std::vector<BucketLayout> layouts() const;
  bool rebuilt() const { return rebuilt_; }
  // The caps in force, and what auto_buckets_after chose (unset before, or without it).
  size_t bucket_cap_bytes() const { return options_.bucket_cap_bytes; }
  size_t first_bucket_cap_bytes() const { return options_.first_bucket_cap_bytes; }
  const std::optional<AutoBucketChoice>& auto_choice() const { return auto_choice_; }
  // The PowerSGD state (hook == powersgd), else null.
  PowerSgd* powersgd() const { return powersgd_.get(); }

 private:
  struct Bucket {
    Tensor flat;                  // (padded) gradients of its parameters, back to back
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets; // element offset of each parameter in flat
    int64_t numel = 0;            // elements of the parameters; flat's tail past it is padding
    size_t pending = 0;           // parameters not yet ready in this backward
    std::unique_ptr<CommHook> hook;
    std::shared_ptr<Work> work;
    Tracer::Clock::time_point launched_at{};
    double comm_sum_s = 0;   // launch to completion, summed over the timed backwards
  };

  // Groups parameters (in `order`) into buckets and rebinds their gradients as views,
  // copying the current gradient values into the new buffers.
  void build_buckets(const std::vector<size_t>& order);
  // A bucket's buffer: the group's shared buffer when it offers one (a collective call).
  Tensor allocate_flat(int64_t numel, DType dtype, Device device);
  void launch(size_t bucket_index);
  void launch_ready_in_order();
  std::string missing_report() const;
  void rebuild_from_rank0_order();
  // auto_buckets_after: time all-reduces, choose the caps on rank 0, broadcast, cut again
  // (runtime/strategy/reducer_auto.cpp).
  void choose_bucket_caps();
  // After kTrialSteps with the chosen caps: rank 0 keeps them only if the measured
  // forward-backward-wait time is no longer than with the caps before; else all ranks go
  // back. The model proposes, the job's own clock decides.
  void end_bucket_trial();
  // Cuts the buckets for these caps where the cut changes (every rank alike).
  bool recut(size_t cap, size_t first);  // true: the cut changed
  void reset_profile();
  // PowerSGD's gate (runtime/strategy/reducer_powersgd.cpp): which buckets compression
  // pays for, decided on rank 0 from this job's profile and a probe of the group, broadcast.
  void gate_powersgd();
  // Waits for bucket i's work and starts its hook's next stage; false when it has none
  // (then the bucket is done: `done` is when its last collective finished).
  bool advance(size_t i, Tracer::Clock::time_point& done);
  std::vector<std::pair<int64_t, double>> probe_allreduce_ms(int64_t max_bytes);

  std::vector<Parameter*> params_;
  std::unordered_map<const Parameter*, size_t> index_of_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  Tracer* tracer_;
  std::vector<Bucket> buckets_;
  static constexpr size_t kNoBucket = static_cast<size_t>(-1);
  std::vector<size_t> bucket_of_;       // param index -> bucket index (kNoBucket: frozen)
  std::vector<uint8_t> marked_;         // this backward
  std::vector<size_t> ready_order_;     // this backward, in mark order
  // Ready times for the cost model: since prepare_for_backward, summed per parameter over
  // the backwards after the first (which includes one-off allocation).
  Tracer::Clock::time_point prepared_at_{};
  std::vector<double> ready_sum_s_;
  double backward_end_sum_s_ = 0;  // when finalize_backward began, since prepare_for_backward
  double sync_sum_s_ = 0;          // when finalize_backward ended, since prepare_for_backward
  int64_t timed_backwards_ = 0;
  std::optional<AutoBucketChoice> auto_choice_;
  std::unique_ptr<PowerSgd> powersgd_;
  // The trial of the chosen caps: the backwards since the change (the first, which fills
  // new buffers, not timed) and their summed time to the end of finalize_backward.
  struct Trial {
    size_t old_cap = 0, old_first = 0;
    double before_ms = 0;  // the same time with the old caps
    int seen = 0;
    double sum_s = 0;
  };
  std::optional<Trial> trial_;
  static constexpr int kTrialSteps = 3;
  size_t next_launch_ = 0;
  bool rebuilt_ = false;
};

}  // namespace tandem
