// OpPackets (see op_packets.h).
#include "collectives/mpi/op_packets.h"

#include <cstring>

#include "collectives/mpi/mpi_runtime.h"
#include "collectives/reduce_kernels.h"

namespace tandem {

OpPackets::OpPackets(MPI_Comm comm, int rank, int size)
    : comm_(comm),
      rank_(rank),
      size_(size),
      mine_(kOpPacketBytes),
      all_(kOpPacketBytes * static_cast<size_t>(size)),
      fingerprints_(static_cast<size_t>(size)) {}

bool OpPackets::fits(const Collective& c) {
  switch (c.op) {
    case OpType::barrier: return true;
    case OpType::broadcast: return c.out.bytes() <= kInlineBytes;
    default: return c.in.bytes() <= kInlineBytes;
  }
}

void OpPackets::exchange(const Collective& c) {
  const OpFingerprint fingerprint = fingerprint_of(c);
  std::memcpy(mine_.data(), &fingerprint, sizeof fingerprint);
  // A broadcast's input is the root's alone (the others' may be unset).
  const bool carries = fits(c) && c.op != OpType::barrier && (c.op != OpType::broadcast || rank_ == c.root);
  if (carries && c.in.bytes() > 0) std::memcpy(mine_.data() + sizeof fingerprint, c.in.data, c.in.bytes());
  TANDEM_MPI_CHECK(rank_, MPI_Allgather(mine_.data(), static_cast<int>(kOpPacketBytes), MPI_BYTE, all_.data(),
                                        static_cast<int>(kOpPacketBytes), MPI_BYTE, comm_));
  for (int r = 0; r < size_; ++r)
    std::memcpy(&fingerprints_[static_cast<size_t>(r)], all_.data() + static_cast<size_t>(r) * kOpPacketBytes,
                sizeof(OpFingerprint));
  if (std::string error = disagreement(c, fingerprints_); !error.empty()) throw CollectiveError(error);
}

void OpPackets::finish_inline(const Collective& c) const {
  const DType d = c.dtype();
  auto* out = static_cast<uint8_t*>(c.out.data);
  // out = piece(0) op piece(1) op ... in rank order, piece(r) at byte `at` of rank r's input.
  const auto reduce_in_rank_order = [&](size_t at, int64_t n) {
    if (size_ == 1) {
      std::memcpy(out, data_of(0) + at, static_cast<size_t>(n) * dtype_size(d));
    } else {
      reduce_elements(d, engine_op(c.reduce), out, data_of(0) + at, data_of(1) + at, n);
      for (int r = 2; r < size_; ++r) reduce_elements(d, engine_op(c.reduce), out, out, data_of(r) + at, n);
    }
    if (c.reduce == ReduceOp::avg) divide_elements(d, out, n, size_);
  };
  switch (c.op) {
    case OpType::allreduce: reduce_in_rank_order(0, c.out.count); break;
    case OpType::reduce_scatter: reduce_in_rank_order(static_cast<size_t>(rank_) * c.out.bytes(), c.out.count); break;
    case OpType::broadcast:
      if (!(rank_ == c.root && c.in_place)) std::memcpy(out, data_of(c.root), c.out.bytes());
      break;
    case OpType::allgather:
      for (int r = 0; r < size_; ++r) {
        if (c.in_place && r == rank_) continue;  // already in place
        std::memcpy(out + static_cast<size_t>(r) * c.in.bytes(), data_of(r), c.in.bytes());
      }
      break;
    case OpType::barrier: break;  // the gather itself was the barrier
  }
}

}  // namespace tandem
