// CrossReplicaSum: what a layer uses to combine a small tensor over every replica of the
// step (SyncBatchNorm's per-channel statistics). The strategy that holds the replicas
// provides it: DDP over its process group (runtime/strategy/ddp_cross_replica.h), DP over
// its replica threads (runtime/strategy/dp_cross_replica.h).
//
// Calling rule, as the process group's: every replica calls sum() the same number of
// times in the same order (one call per SyncBatchNorm layer and pass, in program order
// from the training thread), so the k-th call on one replica meets the k-th on the others.
// Invariant: after sum() returns, every replica's tensor holds the same bytes.
#pragma once

#include <string>

#include "tandem/runtime/tensor.h"

namespace tandem {

class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  // Replaces `values` (f32, contiguous, on the caller's device) by its elementwise sum
  // over every replica, and returns once it is there. `what` names the op in a timeout
  // or failure ("bn1 forward statistics"). Throws std::runtime_error (naming `what`) on a
  // timeout or a failed collective.
  virtual void sum(Tensor& values, const std::string& what) = 0;
  virtual int replicas() const = 0;
};

}  // namespace tandem
