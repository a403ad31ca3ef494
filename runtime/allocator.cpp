// Allocation and copies dispatched by device kind. The CUDA side lives in
// cuda/ (or runtime/cuda_unavailable.cpp in a CPU-only build).
#include "runtime/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "runtime/cuda_device.h"

namespace tandem {

void* device_alloc(size_t bytes, Device device) {
  if (device.is_cuda()) return cuda::alloc(bytes, device.index);
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

void device_free(void* ptr, size_t bytes, Device device) {
  if (!ptr) return;
  if (device.is_cuda()) {
    cuda::free(ptr, bytes, device.index);
    return;
  }
  std::free(ptr);
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::copy(dst, dst_device, src, src_device, bytes);
}

int cuda_device_count() { return cuda::device_count(); }

}  // namespace tandem
