// CachingAllocator: one per device. Blocks come from cudaMalloc once and are kept after
// release in size-keyed free lists, so a training step, which asks for the same sizes
// every time, calls cudaMalloc only while warming up.
//
// Sizes are rounded up: to 512 B up to 1 MiB; above, to 1/8 of the next power of two
// (at most 12.5% waste), so slightly different requests share blocks. A request takes
// the smallest cached block that fits and wastes at most 2x (small) or 1.25x (large);
// blocks are never split or merged (no fragmentation bookkeeping).
//
// Invariant (stream-ordered reuse): every user of a device's memory runs on that
// device's compute stream, so a block released on the host while kernels that read it
// are still queued may be handed out again at once: the next user's kernels queue
// behind them. Memory touched by another stream must be joined back (an event) before
// release. Thread-safe: DataParallel's replica threads allocate concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/cuda_device.h"

namespace tandem::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (> 0) bytes, 256-byte aligned. On cudaMalloc failure,
  // frees the cache and retries once; then throws naming the sizes involved.
  void* allocate(size_t bytes);
  // Back to the cache. Never throws (called from destructors); unknown pointers are ignored.
  void release(void* ptr) noexcept;

  MemoryStats stats() const;
  void reset_peak();
  // cudaFree every cached block (the caller has synchronised the device).
  void release_cached();

  static size_t round_size(size_t bytes);

  // Staging buffers report their pinned allocations here so memory_stats() shows them.
  void count_pinned_alloc();

 private:
  void free_cached_locked();

  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // block -> rounded size
  std::multimap<size_t, void*> cached_;     // rounded size -> free block
  MemoryStats stats_;
};

}  // namespace tandem::cuda
