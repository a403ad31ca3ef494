// Device memory allocation and copies, dispatched by device kind. CPU memory is
// 64-byte aligned (AVX-512 loads); CUDA memory comes from a caching allocator in
// cuda/ so no training step calls cudaMalloc.
#pragma once

#include <cstddef>

#include "runtime/tensor.h"

namespace tandem {

void* device_alloc(size_t bytes, Device device);
void device_free(void* ptr, size_t bytes, Device device);
// Copies between any two devices (host<->device, device<->device, host<->host).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Number of CUDA devices visible (0 when built without CUDA or none present).
int cuda_device_count();

}  // namespace tandem
