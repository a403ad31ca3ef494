// The batch and learning rate of a DDP run resumed from a checkpoint (tandem-train
// --elastic-batch; docs/elastic.md): what an elastic job needs when nodes leave or join.
// Pure arithmetic on the checkpoint's metadata, so the policy is unit-tested apart from
// any run.
//   global    keep the global batch (per-rank batch x world x --grad-accum) of the
//             checkpoint: the per-rank batch when it divides evenly, else --grad-accum,
//             else an error naming the numbers; the learning rate is unchanged
//   per-rank  keep --batch-size; scale the learning rate (--lr and --min-lr) linearly,
//             x world / base world, the base being the world size the job first ran at
//             (carried from checkpoint to checkpoint), so repeated changes do not compound
//   off       change nothing
// Invariant: the plan depends on the checkpoint, the flags and the world size only, never
// on the world sizes between, so every resume of an elastic job (the flags are the same
// each time) trains with the global batch (global) or the rate (per-rank) of the job's
// rule, also a resume at the checkpoint's own world size after an earlier change.
#pragma once

#include <cstdint>
#include <string>

#include "train/train_config.h"
#include "runtime/checkpoint/checkpoint_meta.h"

namespace tandem {

// The extra key of checkpoints that holds the base world size.
inline constexpr const char* kBaseWorldKey = "elastic.base_world_size";

// What a run trains with: the flags, or the plan's adaptation of them.
struct BatchSettings {
  int64_t batch_size = 0;  // per rank and micro-batch
  int64_t grad_accum = 1;
  float lr = 0, min_lr = 0;  // TrainConfig's (the schedule's) float
};

struct ElasticBatchPlan {
  BatchSettings settings;
  int64_t base_world = 0;
  std::string note;  // what changed, for the log; empty when nothing did
};

// `policy` resolved (never automatic). Throws std::runtime_error when the global batch
// cannot be kept at `world`, or the checkpoint's base world size is not a number.
ElasticBatchPlan plan_elastic_batch(ElasticBatch policy, const CheckpointMeta& checkpoint, const BatchSettings& flags,
                                    int64_t world);

// "global", "per-rank", "off" ("auto" for automatic).
const char* elastic_batch_str(ElasticBatch policy);

// Resolves `automatic` from TANDEM_ELASTIC (set by an elastic tandemrun; outside DDP: off),
// records the base world size and, for a DDP run about to resume (its checkpoint's metadata
// read here), applies the plan to `c`. Rank 0 logs what changed.
void apply_elastic_batch(TrainConfig& c);

}  // namespace tandem
