// Host-to-device staging through a ring of pinned buffers (see pinned_staging.h).
#include "runtime/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/cuda_check.h"

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

PinnedStaging::Slot& PinnedStaging::acquire(size_t bytes) {
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
    TANDEM_CUDA_CHECK(cudaHostAlloc(&s.host, cap, cudaHostAllocPortable), device_);
    s.capacity = cap;
    stats_sink_.count_pinned_alloc();
  }
  return s;
}

void PinnedStaging::host_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t done = 0;
  while (done < bytes) {
    const size_t chunk = std::min(bytes - done, kMaxSlotBytes);
    Slot& s = acquire(chunk);
    std::memcpy(s.host, static_cast<const char*>(src) + done, chunk);
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst) + done, s.host, chunk, cudaMemcpyHostToDevice, stream), device_);
    TANDEM_CUDA_CHECK(cudaEventRecord(s.done, stream), device_);
    s.pending = true;
    done += chunk;
  }
}

}  // namespace tandem::cuda
