// CUDA entry points for a build without CUDA: every call that needs a GPU says so.
#include <stdexcept>

#include "runtime/cuda_device.h"

namespace tandem::cuda {

[[noreturn]] static void no_cuda() {
  throw std::runtime_error(
      "this Tandem build has no CUDA support (configure with nvcc available, or "
      "-DTANDEM_WITH_CUDA=ON); use --device cpu");
}

int device_count() { return 0; }
std::string unavailable_reason() { return "this Tandem build has no CUDA support"; }
void* alloc(size_t, int) { no_cuda(); }
void free(void*, size_t, int) {}
void copy(void*, Device, const void*, Device, size_t) { no_cuda(); }
Kernels& kernels(int) { no_cuda(); }

void* compute_stream(int) { no_cuda(); }
void synchronize(int) { no_cuda(); }
void set_device(int) { no_cuda(); }
std::string device_name(int) { no_cuda(); }

MemoryStats memory_stats(int) { no_cuda(); }
size_t peak_allocated_bytes(int) { no_cuda(); }
void reset_peak_memory(int) { no_cuda(); }
void empty_cache(int) { no_cuda(); }

void* alloc_pinned_host(size_t) { no_cuda(); }
void free_pinned_host(void*) {}

}  // namespace tandem::cuda
