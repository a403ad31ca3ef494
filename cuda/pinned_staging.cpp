// Host-to-device staging through a ring of pinned buffers (see pinned_staging.h).
#include "cuda/pinned_staging.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "cuda/caching_allocator.h"
#include "cuda/cuda_check.h"

namespace tandem::cuda {

PinnedStaging::~PinnedStaging() {
  for (Slot& s : slots_) {
    if (s.done) {
      TANDEM_CUDA_IGNORE(cudaEventSynchronize(s.done));
      TANDEM_CUDA_IGNORE(cudaEventDestroy(s.done));
    }
    if (s.host) TANDEM_CUDA_IGNORE(cudaFreeHost(s.host));
  }
}

PinnedStaging::Slot* PinnedStaging::acquire(size_t bytes) {
  if (pageable_) return nullptr;
  Slot& s = slots_[next_];
  next_ = (next_ + 1) % kSlots;
  if (!s.done) TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), device_);
  if (s.pending) {
    TANDEM_CUDA_CHECK(cudaEventSynchronize(s.done), device_);  // its last copy has left the buffer
    s.pending = false;
  }
  if (s.capacity < bytes) {
    if (s.host) TANDEM_CUDA_CHECK(cudaFreeHost(s.host), device_);
    s.host = nullptr;
    s.capacity = 0;
    size_t cap = size_t{1} << 20;
    while (cap < bytes) cap <<= 1;
    cap = std::min(cap, kMaxSlotBytes);
    const cudaError_t rc = cudaHostAlloc(&s.host, cap, cudaHostAllocPortable);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();  // refused, not a fault: no later launch check may see it
      s.host = nullptr;
      pageable_ = true;
      spdlog::warn("cuda:{}: cudaHostAlloc of {} bytes refused ({}): host-to-device copies fall back to pageable "
                   "memory, each followed by a stream synchronise (slower, same results)",
                   device_, cap, cudaGetErrorString(rc));
      return nullptr;
    }
    s.capacity = cap;
    stats_sink_.count_pinned_alloc();
  }
  return &s;
}

void PinnedStaging::copy_pageable(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), device_);
  // The copy may still be reading src: wait, so src may be reused when host_to_device returns.
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream), device_);
}

void PinnedStaging::host_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t done = 0;
  while (done < bytes) {
    const size_t chunk = std::min(bytes - done, kMaxSlotBytes);
    Slot* s = acquire(chunk);
    if (!s) {
      copy_pageable(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, bytes - done, stream);
      return;
    }
    std::memcpy(s->host, static_cast<const char*>(src) + done, chunk);
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst) + done, s->host, chunk, cudaMemcpyHostToDevice, stream), device_);
    TANDEM_CUDA_CHECK(cudaEventRecord(s->done, stream), device_);
    s->pending = true;
    done += chunk;
  }
}

}  // namespace tandem::cuda
