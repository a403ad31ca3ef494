// PinnedStaging: host-to-device copies from pageable memory (every CPU Tensor) through a
// small ring of page-locked buffers, so the DMA runs asynchronously on the compute
// stream and the host returns as soon as its bytes are in a staging buffer.
//
//   host:   memcpy(src -> slot k)  cudaMemcpyAsync(slot k -> dst)  record done[k]  return
//   stream: ....... earlier kernels ....... [copy k] [done k] ..... later kernels
//
// Invariant: a slot is rewritten only after its previous copy's event has fired, and a
// slot grows (cudaHostAlloc) only when a larger copy arrives, so a steady training loop
// allocates no pinned memory after its first step. Copies larger than one slot go
// through the ring in chunks. Thread-safe.
//
// Without pinned memory (cudaHostAlloc refused: a locked-memory limit, a container, a
// driver that will not pin): the copies go straight from the caller's pageable buffer and
// each is followed by a stream synchronise, so the promise "returns when src may be reused"
// holds without relying on the runtime's pageable-copy behaviour. Logged once per device;
// slower (the copy no longer overlaps the host), never wrong.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <mutex>

namespace tandem::cuda {

class CachingAllocator;

class PinnedStaging {
 public:
  PinnedStaging(int device, CachingAllocator& stats_sink) : device_(device), stats_sink_(stats_sink) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // dst: device memory of this device; src: any host memory. Returns when src may be reused.
  void host_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);

  static constexpr size_t kSlots = 4;
  static constexpr size_t kMaxSlotBytes = size_t{64} << 20;

 private:
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  // The next slot, at least `bytes` large; nullptr once pinned memory has been refused.
  Slot* acquire(size_t bytes);
  // The fallback: a synchronous copy from pageable memory.
  void copy_pageable(void* dst, const void* src, size_t bytes, cudaStream_t stream);

  int device_;
  CachingAllocator& stats_sink_;
  std::mutex mutex_;
  std::array<Slot, kSlots> slots_;
  size_t next_ = 0;
  bool pageable_ = false;  // cudaHostAlloc was refused: every later copy is copy_pageable
};

}  // namespace tandem::cuda
