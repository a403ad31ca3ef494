// The cross-rank op check of the CPU backends: before each op's data moves, every rank
// gathers every other rank's fingerprint of that op (kind, dtype, element counts, root,
// reduce op, seq) through the engine itself, and the op fails on every rank at once
// if they differ. Without it, ranks passing different counts corrupt memory or hang
// until the timeout (a zero-byte op skips the engine, so 0 vs 7 elements would hang).
//
// Invariant: a fingerprint has the same size whatever the op, so the gather itself
// always matches across ranks; every rank sees the same fingerprints and therefore
// takes the same decision, so no rank runs the op while another refuses it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/types.h"

namespace tandem {

// What a rank was asked to do for one op. Plain bytes on the wire (all ranks run the
// same build on the same architecture).
struct OpFingerprint {
  uint64_t seq = 0;
  int64_t in_count = 0;   // elements
  int64_t out_count = 0;  // elements
  int32_t root = 0;
  uint8_t op = 0;      // OpType
  uint8_t dtype = 0;   // DType
  uint8_t reduce = 0;  // ReduceOp
  uint8_t unused = 0;
};
static_assert(sizeof(OpFingerprint) == 32, "OpFingerprint travels as 32 raw bytes");

OpFingerprint fingerprint_of(const Collective& c);
// "allreduce f32 sum 1000 elements", "allgather bf16 7 elements per rank", ...;
// " as #N" is added when the fingerprint's seq is not `expected_seq`.
std::string describe_fingerprint(const OpFingerprint& f, uint64_t expected_seq);

// Collects every rank's fingerprint: all[r] receives rank r's. Runs the engine's
// allgather on the comm thread; throws what the engine throws.
using FingerprintGather = std::function<void(const OpFingerprint& mine, OpFingerprint* all, uint64_t seq)>;

// "" when the ranks agree, else the error: "allreduce #5 (f32 sum, 4000 bytes, in
// place): ranks disagree: rank 0: allreduce f32 sum 1000 elements; rank 1: ..."
// (ranks with the same fingerprint are listed together, e.g. "ranks 0-2").
std::string disagreement(const Collective& c, const std::vector<OpFingerprint>& all);

// Gathers the fingerprints of `c` from `size` ranks and throws CollectiveError with
// disagreement()'s message if they differ.
void require_ranks_agree(const Collective& c, int size, const FingerprintGather& gather);

}  // namespace tandem
