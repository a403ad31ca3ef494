// The entry points of runtime/cuda_device.h for a CUDA build: device discovery, the
// caching allocator, copies between host and devices, streams and memory statistics.
#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "runtime/cuda_device.h"

namespace tandem::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for a CPU run
    return 0;
  }
  return n;
}

void* alloc(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  return context(device).allocator.allocate(bytes);
}

void free(void* ptr, size_t, int device) {
  if (!ptr) return;
  try {
    context(device).allocator.release(ptr);
  } catch (...) {
    // Only reachable for a device that never allocated: nothing to return.
  }
}

namespace {

// Once per (dst_dev, src_dev): lets dst_dev read src_dev's memory directly when the
// hardware allows it. Either way the copy below is correct; this makes it direct.
void enable_peer_access(int dst_dev, int src_dev) {
  DeviceContext& d = context(dst_dev);
  std::lock_guard<std::mutex> lock(d.peer_mutex);
  for (int p : d.peers_checked)
    if (p == src_dev) return;
  d.peers_checked.push_back(src_dev);
  int can = 0;
  ensure_current(dst_dev);
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dst_dev, src_dev), dst_dev);
  if (!can) return;
  const cudaError_t err = cudaDeviceEnablePeerAccess(src_dev, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // consumed: a later launch check must not see it
    return;
  }
  TANDEM_CUDA_CHECK(err, dst_dev);
}

// dst on dst_dev's stream receives src from src_dev: each stream waits for the other's
// work up to the copy, so neither side can reuse the memory too early (the caching
// allocator's stream-ordered reuse relies on it).
void peer_copy(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
  enable_peer_access(dst_dev, src_dev);
  DeviceContext& d = context(dst_dev);
  DeviceContext& s = context(src_dev);
  cudaEvent_t src_ready = nullptr, copied = nullptr;
  ensure_current(src_dev);
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming), src_dev);
  TANDEM_CUDA_CHECK(cudaEventRecord(src_ready, s.stream), src_dev);
  ensure_current(dst_dev);
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), dst_dev);
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(d.stream, src_ready, 0), dst_dev);
  TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, d.stream), dst_dev);
  TANDEM_CUDA_CHECK(cudaEventRecord(copied, d.stream), dst_dev);
  ensure_current(src_dev);
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s.stream, copied, 0), src_dev);
  // Destroying a recorded event is legal; its resources go when it completes.
  TANDEM_CUDA_IGNORE(cudaEventDestroy(src_ready));
  TANDEM_CUDA_IGNORE(cudaEventDestroy(copied));
}

}  // namespace

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cpu()) {
    DeviceContext& c = context(dst_device.index);
    ensure_current(c.device);
    c.staging.host_to_device(dst, src, bytes, c.stream);
  } else if (dst_device.is_cpu() && src_device.is_cuda()) {
    context(src_device.index).download(dst, src, bytes);
  } else if (dst_device.is_cuda() && src_device.is_cuda()) {
    if (dst_device.index == src_device.index) {
      DeviceContext& c = context(dst_device.index);
      ensure_current(c.device);
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream), c.device);
    } else {
      peer_copy(dst, dst_device.index, src, src_device.index, bytes);
    }
  } else {
    throw std::logic_error("cuda::copy called for a host-to-host copy");
  }
}

Kernels& kernels(int device) { return *context(device).kernels; }

void* compute_stream(int device) { return context(device).stream; }

void synchronize(int device) {
  DeviceContext& c = context(device);
  ensure_current(c.device);
  c.synchronize();
}

void set_device(int device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    throw std::invalid_argument("cannot use cuda:" + std::to_string(device) + ": " +
                                (count == 0 ? std::string("no CUDA device is visible")
                                            : std::to_string(count) + " CUDA device(s) are visible") +
                                " (a DDP rank uses the GPU of its LOCAL_RANK; start at most one rank per GPU "
                                "per node, or set CUDA_VISIBLE_DEVICES)");
  TANDEM_CUDA_CHECK(cudaSetDevice(device), device);
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&p, device), device);
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

MemoryStats memory_stats(int device) { return context(device).allocator.stats(); }

size_t peak_allocated_bytes(int device) { return memory_stats(device).peak_allocated_bytes; }

void reset_peak_memory(int device) { context(device).allocator.reset_peak(); }

void empty_cache(int device) {
  DeviceContext& c = context(device);
  ensure_current(c.device);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize(), c.device);
  c.allocator.release_cached();
}

namespace {

// The pageable buffers alloc_pinned_host handed out in place of pinned ones, so that
// free_pinned_host knows which free they need; and whether the fallback was logged.
struct PageableFallbacks {
  std::mutex mutex;
  std::unordered_set<void*> buffers;
  bool logged = false;
};

PageableFallbacks& pageable_fallbacks() {
  static PageableFallbacks f;  // process-wide like the pinned memory it stands in for
  return f;
}

}  // namespace

// Pinned when the driver allows it; else pageable memory (logged once). Every copy Tandem
// makes to or from it is complete when the copy call returns (device->host copies wait;
// host->device copies go through PinnedStaging), so pageable memory is slower, not wrong.
void* alloc_pinned_host(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t rc = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (rc == cudaSuccess) return p;
  (void)cudaGetLastError();  // refused, not a fault: no later launch check may see it
  p = std::malloc(bytes);
  if (!p) throw std::bad_alloc();
  PageableFallbacks& f = pageable_fallbacks();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.buffers.insert(p);
  if (!f.logged) {
    f.logged = true;
    spdlog::warn("cudaHostAlloc of {} bytes refused ({}) {}: host staging buffers fall back to pageable memory "
                 "(slower copies, same results)",
                 bytes, cudaGetErrorString(rc), where(-1));
  }
  return p;
}

void free_pinned_host(void* ptr) {
  if (!ptr) return;
  {
    PageableFallbacks& f = pageable_fallbacks();
    std::lock_guard<std::mutex> lock(f.mutex);
    if (f.buffers.erase(ptr) == 1) {
      std::free(ptr);
      return;
    }
  }
  TANDEM_CUDA_IGNORE(cudaFreeHost(ptr));
}

}  // namespace tandem::cuda
