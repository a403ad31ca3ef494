// Rounds: the bounded staging of the reduce-scatters and all-gathers that Tandem runs
// itself (gloo, mpi, hier; issue 22). A buffer as large as a bucket is never staged
// whole: each op works through its slices in rounds of at most round_bytes() of each
// slice, and the staged pieces of a round are reduced in rank order, so the result is
// bit-identical whatever the round (out = rank 0's piece, then op= rank 1's, ...).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "collectives/types.h"

namespace tandem {

// A round's bytes of each slice by default: messages of 1 MiB already run at the
// transports' full bandwidth (Gloo's own allreduce cuts 1 MiB segments too), and
// world size x 1 MiB stays far below a bucket (25 MiB by default).
constexpr size_t kRoundBytes = size_t{1} << 20;

// kRoundBytes, or TANDEM_COLLECTIVE_CHUNK_KB KiB (tests and tuning; every rank must pass
// the same). Throws std::invalid_argument naming the value when it is not a positive
// whole number of KiB.
size_t round_bytes_from_env();

// Elements per round of a slice of `count` elements of `elem` bytes: at least 1, at
// most `count` and at most round_bytes (and max_bytes, for engines whose counts are ints).
int64_t round_elements(size_t round_bytes, size_t elem, int64_t count, size_t max_bytes = SIZE_MAX);

// dst (n elements) = staged[0] op staged[1] op ... op staged[size - 1], in that order,
// where staged[r] is the n-element piece at staged + r * n * dtype_size(dtype). `op` is
// the engine's (sum for avg: the caller divides).
void reduce_pieces_in_rank_order(DType dtype, ReduceOp op, void* dst, const uint8_t* staged, int size, int64_t n);

// The most bytes staged at once, for ProcessGroup::peak_temporary_bytes. One writer
// (the comm thread), any readers.
class PeakBytes {
 public:
  void note(size_t bytes) {
    if (bytes > bytes_.load(std::memory_order_relaxed)) bytes_.store(bytes, std::memory_order_relaxed);
  }
  size_t get() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  std::atomic<size_t> bytes_{0};
};

}  // namespace tandem
