// The per-device caching allocator (see caching_allocator.h for the rules).
#include "cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/cuda_check.h"

namespace tandem::cuda {

namespace {

constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// Makes `device` current for this thread while a cudaMalloc/cudaFree runs, then restores.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) TANDEM_CUDA_CHECK(cudaSetDevice(device), device);
  }
  ~CurrentDevice() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= kLargeThreshold) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  size_t pow2 = kLargeThreshold;
  while (pow2 < bytes) pow2 <<= 1;
  const size_t granule = pow2 / 8;
  return (bytes + granule - 1) / granule * granule;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes == 0 ? 1 : bytes);
  const size_t limit = size <= kLargeThreshold ? 2 * size : size + size / 4;
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  size_t got = 0;
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= limit) {
    ptr = it->second;
    got = it->first;
    cached_.erase(it);
    ++stats_.cache_hits;
  } else {
    CurrentDevice on(device_);
    cudaError_t rc = cudaMalloc(&ptr, size);
    if (rc == cudaErrorMemoryAllocation && !cached_.empty()) {
      (void)cudaGetLastError();  // clear the sticky-free error before retrying
      // Cached blocks may still be read by queued kernels: wait for them, then free.
      TANDEM_CUDA_CHECK(cudaDeviceSynchronize(), device_);
      free_cached_locked();
      rc = cudaMalloc(&ptr, size);
    }
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      TANDEM_CUDA_IGNORE(cudaMemGetInfo(&free_b, &total_b));  // for the message only
      throw std::runtime_error("CUDA out of memory: cudaMalloc of " + mib(size) + " failed (" +
                               cudaGetErrorString(rc) + ") " + where(device_) + "; Tandem holds " +
                               mib(stats_.allocated_bytes) + " in live tensors and " +
                               mib(stats_.reserved_bytes - stats_.allocated_bytes) +
                               " cached; the device reports " + mib(free_b) + " free of " + mib(total_b) +
                               ". Use a smaller --batch-size.");
    }
    got = size;
    stats_.reserved_bytes += size;
    ++stats_.device_mallocs;
  }
  live_.emplace(ptr, got);
  stats_.allocated_bytes += got;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
  return ptr;
}

void CachingAllocator::release(void* ptr) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  stats_.allocated_bytes -= it->second;
  cached_.emplace(it->second, ptr);
  live_.erase(it);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  CurrentDevice on(device_);
  free_cached_locked();
}

void CachingAllocator::free_cached_locked() {
  for (auto& [size, ptr] : cached_) {
    TANDEM_CUDA_IGNORE(cudaFree(ptr));
    stats_.reserved_bytes -= size;
  }
  cached_.clear();
}

void CachingAllocator::count_pinned_alloc() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.pinned_host_allocs;
}

}  // namespace tandem::cuda
