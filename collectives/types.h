// Vocabulary shared by every collective backend: reduction ops, op kinds, the
// description of one issued collective, and the error types. The typed buffers they move
// are core's (core/buffer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/core/buffer.h"
#include "tandem/core/dtype.h"

namespace tandem {

enum class ReduceOp : uint8_t { sum, avg, min, max };
const char* reduce_op_str(ReduceOp op);

enum class OpType : uint8_t { allreduce, broadcast, allgather, reduce_scatter, barrier };
const char* op_str(OpType op);

// One issued collective, normalised by ProcessGroup before it reaches a backend.
// Buffer conventions (as NCCL's, so every backend agrees):
//   allreduce       in.count == out.count; in place: in.data == out.data
//   broadcast       in read on root only; in place: in.data == out.data
//   allgather       out.count == in.count * size; in place: in is out's slice `rank`
//   reduce_scatter  in.count == out.count * size; in place: out is in's slice `rank`
//                   (the other slices of an in-place buffer are unspecified afterwards)
//   barrier         no buffers
struct Collective {
  OpType op = OpType::barrier;
  uint64_t seq = 0;  // 1, 2, 3, ... per process group, the same on every rank
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  bool in_place = false;
  Buffer in;
  Buffer out;

  DType dtype() const { return out.dtype; }
  // The larger of the two buffers: what nccl-tests reports as the op's size.
  size_t bytes() const { return in.bytes() > out.bytes() ? in.bytes() : out.bytes(); }
  // "allreduce #7 (f32 sum, 4096 bytes)"
  std::string describe() const;
};

// Any failure of a collective or of the group (engine error, broken group).
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A collective (or rendezvous) that did not complete before its deadline.
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};
// A backend asked for an op (or dtype/op combination) it does not implement.
class UnsupportedOp : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

}  // namespace tandem
