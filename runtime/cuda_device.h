// The CUDA entry points the device-agnostic runtime calls. Implemented in
// runtime/cuda/ when built with CUDA; runtime/cuda_unavailable.cpp otherwise, where
// each one throws a message saying the build has no CUDA (device_count() returns 0).
#pragma once

#include <cstddef>

#include "runtime/tensor.h"

namespace tandem {
class Kernels;
namespace cuda {

int device_count();
void* alloc(size_t bytes, int device);
void free(void* ptr, size_t bytes, int device);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
Kernels& kernels(int device);

}  // namespace cuda
}  // namespace tandem
