// The batch and learning rate of a DDP run resumed at another world size than its
// checkpoint's (tandem-train --elastic-batch; docs/elastic.md): what an elastic job needs
// when nodes leave or join. Pure arithmetic on the checkpoint's metadata, so the policy is
// unit-tested apart from any run.
//   global    keep the global batch (per-rank batch x world x --grad-accum) of the
//             checkpoint: the per-rank batch when it divides evenly, else --grad-accum,
//             else an error naming the numbers; the learning rate is unchanged
//   per-rank  keep --batch-size; scale the learning rate linearly, lr x world / base
//             world, the base being the world size the job first ran at (carried from
//             checkpoint to checkpoint), so repeated changes do not compound
//   off       change nothing
// The world size unchanged, nothing changes: the flags are the user's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/train_config.h"
#include "runtime/checkpoint/checkpoint_meta.h"

namespace tandem {

// The extra key of checkpoints that holds the base world size.
inline constexpr const char* kBaseWorldKey = "elastic.base_world_size";

struct ElasticBatchPlan {
  int64_t batch_size = 0;
  int64_t grad_accum = 1;
  double lr = 0;
  int64_t base_world = 0;
  std::string note;  // what changed, for the log; empty when nothing did
};

// `policy` resolved (never automatic). Throws std::runtime_error when the global batch
// cannot be kept at `world`.
ElasticBatchPlan plan_elastic_batch(ElasticBatch policy, const CheckpointMeta& checkpoint, int64_t batch_size,
                                    int64_t grad_accum, double lr, int64_t world);

// Applies the plan to a DDP config about to resume (its checkpoint's metadata read here),
// resolving `automatic` from TANDEM_ELASTIC (set by an elastic tandemrun). Logs the change.
// Leaves `c` as it is when there is nothing to resume or the mode is not DDP.
void apply_elastic_batch(TrainConfig& c);

}  // namespace tandem
