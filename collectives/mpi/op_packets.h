// The mpi group's op check, with its small ops riding in it: one MPI_Allgather of a
// fixed-size packet per rank, the rank's fingerprint of the op (collectives/op_check.h)
// and, when the op's input fits in the rest, the input itself. An op whose input fits
// (an 8-byte all-reduce, a barrier, a scalar's all-gather) is then complete once the
// fingerprints agree: one MPI call, as raw MPI's own, instead of a check and then the op.
// Larger ops wait for this one small exchange before their data moves.
//
// Invariant: the packet has the same size whatever the op, so the gather always matches
// across ranks, even when they disagree on the op; every rank sees every fingerprint,
// takes the same decision, and reads the inline data only when all agree (so all
// passed the same sizes). Inline reductions run in rank order, so their results do not
// depend on MPI's algorithm: identical on every rank, and the same as shm's.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/op_check.h"
#include "collectives/types.h"

namespace tandem {

// 256 bytes: Open MPI 4.1.4's two-rank MPI_Allgather costs 2.3x more from 264 bytes per
// rank on (measured: collectives/README.md, the op check).
constexpr size_t kOpPacketBytes = 256;
constexpr size_t kInlineBytes = kOpPacketBytes - sizeof(OpFingerprint);

class OpPackets {
 public:
  OpPackets(MPI_Comm comm, int rank, int size);

  // Gathers every rank's packet for `c` and throws CollectiveError (disagreement()'s
  // message) if the ranks' fingerprints differ. When `c` fits, its input travels along
  // and finish_inline() completes it. Called on the comm thread only.
  void exchange(const Collective& c);
  // Whether `c`'s input travels in its packet (the same answer on every rank once the
  // fingerprints agree: it depends on the sizes and the root only).
  static bool fits(const Collective& c);
  // Completes `c` from the gathered packets (after exchange() of a `c` that fits).
  void finish_inline(const Collective& c) const;

 private:
  const uint8_t* data_of(int r) const { return all_.data() + static_cast<size_t>(r) * kOpPacketBytes + sizeof(OpFingerprint); }

  MPI_Comm comm_;
  int rank_, size_;
  std::vector<uint8_t> mine_;  // kOpPacketBytes
  std::vector<uint8_t> all_;   // size x kOpPacketBytes
  std::vector<OpFingerprint> fingerprints_;
};

}  // namespace tandem
