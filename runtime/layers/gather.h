// AllGatherRows: a differentiable all-gather along dimension 0, for collectives inside a
// model or a loss (InfoNCE compares each row with every rank's rows: runtime/layers/info_nce.h).
//   forward   x (N, ...) on every rank -> (world*N, ...), the ranks' rows in rank order
//             (rank r's rows at [r*N, (r+1)*N))
//   backward  dy (world*N, ...) -> dx (N, ...) = the SUM over ranks of their dy's slice
//             for this rank (a reduce-scatter with sum): every rank's loss read this rank's
//             rows, so this rank's gradient collects every rank's share
// With a null group (single, dp) both are the identity and nothing is communicated.
//
// Invariant: every rank gathers the same shape. forward checks it with one small
// all-gather of (rows, elements per row) before the data's, and throws naming every
// rank's count if they differ (on every rank, so none is left waiting). Every wait has the
// group's timeout. nccl takes the device tensors themselves; a host backend (mpi, gloo,
// shm) given device tensors has them staged through host memory (as host_collectives.h).
// The result buffers are this object's, reused across calls once the caller lets go of
// the last ones; they stay valid until the next call of the same method.
#pragma once

#include <memory>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

class AllGatherRows {
 public:
  explicit AllGatherRows(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}

  // (N, ...) -> (world*N, ...). Null group: x itself.
  Tensor forward(const Tensor& x);
  // (world*N, ...) -> (N, ...), summed over ranks; N is the last forward's. Null group: dy itself.
  Tensor backward(const Tensor& dy);

  int world() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

 private:
  void check_device(Device device) const;
  void check_same_shape(const Tensor& x);

  std::shared_ptr<ProcessGroup> group_;
  Shape local_shape_;   // the last forward's x shape
  Tensor gathered_;     // (world*N, ...) forward's result
  Tensor grad_;         // (N, ...) backward's result
  Tensor dy_in_;        // backward's input, held while a device op may still read it
  Tensor host_all_;     // host staging: (world*N, ...)
  Tensor host_mine_;    // host staging: (N, ...)
};

}  // namespace tandem
