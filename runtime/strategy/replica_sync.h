// What keeps the replicas' non-trained state equal, per strategy:
//   - CrossReplicaSum implementations (runtime/cross_replica.h) for SyncBatchNorm: over a
//     DDP process group, and over DataParallel's replica threads;
//   - DDP's buffer broadcast (rank 0's buffers to every rank, one coalesced collective)
//     and DataParallel's buffer copy (device 0's to every replica).
//
// The order of collectives in a DDP step with SyncBatchNorm and broadcast buffers (every
// rank issues the same sequence from its training thread; each backend runs its ops in
// issue order: collectives/work.h's invariant):
//   forward   [ZeRO: the last step's parameter all-gathers, waited per layer]
//             one statistics all-reduce per SyncBatchNorm layer, in layer order, waited
//             before the layer normalises (no bucket is in flight during a forward)
//   backward  bucket all-reduces, launched as buckets fill and not waited, interleaved in
//             program order with one gradient-sums all-reduce per SyncBatchNorm layer,
//             waited at once: it waits behind the buckets issued before it, never for one
//             issued after it, so it cannot deadlock
//   end       the reducer waits for every bucket (finalize_backward), then one buffer
//             broadcast from rank 0, waited
// Once per synchronising forward_backward, whatever the micro-batches: a rank out of data
// under uneven inputs issues it too. Backward never reads the buffers (BatchNorm's backward
// uses the batch statistics), so broadcasting after it equals PyTorch's broadcast before
// each forward: every rank then holds rank 0's buffers, bit for bit, after every step.
// Activation checkpointing's recompute repeats a layer's statistics all-reduce inside
// backward, at the same point on every rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/cross_replica.h"
#include "tandem/runtime/model.h"

namespace tandem {

// DDP: sum over the group's ranks (an all-reduce through the group's async work, waited
// with `timeout`; device tensors go through the host when the backend takes host memory
// only). A failure is the group's CollectiveError or CollectiveTimeout, naming the op.
class GroupCrossReplicaSum final : public CrossReplicaSum {
 public:
  GroupCrossReplicaSum(std::shared_ptr<ProcessGroup> group, std::chrono::milliseconds timeout)
      : group_(std::move(group)), timeout_(timeout) {}
  void sum(Tensor& values, const std::string& what) override;
  int replicas() const override { return group_->size(); }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::chrono::milliseconds timeout_;
};

// DataParallel: sum over the replica threads of one process. participant(i) is replica
// i's handle; the k-th sum() of every participant meet, and each receives the sum in
// replica order (0, 1, ...), whatever order they arrived in, so the result is
// deterministic. A participant waits at most `timeout` for the others; cancel() (a
// replica failed) makes every waiting and later sum() throw at once.
class ThreadCrossReplicaSum : public std::enable_shared_from_this<ThreadCrossReplicaSum> {
 public:
  ThreadCrossReplicaSum(int replicas, std::chrono::milliseconds timeout);
  std::shared_ptr<CrossReplicaSum> participant(int index);
  void cancel(const std::string& reason);

 private:
  class Participant;
  void sum(int index, Tensor& values, const std::string& what);

  const int replicas_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<std::vector<float>> slots_;  // each replica's values, on the host
  std::vector<float> result_;
  std::string cancelled_;
};

// Gives every BatchNorm layer of `model` the sum (SyncBatchNorm); returns how many it
// found. A null sum turns synchronisation off again.
int set_batchnorm_sync(Model& model, const std::shared_ptr<CrossReplicaSum>& sum);

// Every buffer of `model` from rank `root`, in one coalesced broadcast (nothing when the
// model has none).
void broadcast_buffers(ProcessGroup& group, Model& model, int root, std::chrono::milliseconds timeout);
// dst's buffers := src's (models built alike; devices may differ).
void copy_buffers(Model& dst, const Model& src);

}  // namespace tandem
