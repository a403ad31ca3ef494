// The entry points of runtime/cuda_device.h for a CUDA build: each forwards to the CUDA
// plugin (core/cuda_plugin.h), which is loaded by the first call that needs it. A CPU
// run calls none of them, so it never maps the CUDA runtime, cuBLAS or NCCL.
// Invariant: the probes (device_count, unavailable_reason) and the frees never throw for
// want of the plugin; every other call throws the loader's message (which names the
// missing library) when it cannot be loaded.
#include <string>

#include "collectives/init.h"
#include "core/cuda_plugin.h"
#include "runtime/cuda_device.h"

namespace tandem {
namespace {
// The plugin binds ProcessGroup's constructor and the flight recorder's, the health's and
// the failure reports' methods to the program's copies (core/cuda_plugin.h). A program
// linked from the static libraries holds only the objects it references; this reference
// keeps init.o, and through it every object a process group needs, in any program that can
// load the plugin for its device (tandem-bench-attention uses no process group), so dlopen
// never fails there with "undefined symbol". The collectives' own ways to the plugin (the
// nccl backend, the benchmark's device memory) are reached through init.o already.
using InitProcessGroup = std::shared_ptr<ProcessGroup> (*)(const InitOptions&);
[[gnu::used]] const InitProcessGroup kKeepProcessGroupObjects = &init_process_group;
}  // namespace
}  // namespace tandem

namespace tandem::cuda {

int device_count() {
  const CudaPlugin* p = try_cuda_plugin();
  return p ? p->device_count() : 0;
}

std::string unavailable_reason() {
  std::string why;
  return try_cuda_plugin(&why) ? std::string() : why;
}

void* alloc(size_t bytes, int device) { return cuda_plugin().alloc(bytes, device); }

// Without the plugin no CUDA pointer can exist: nothing to free.
void free(void* ptr, size_t bytes, int device) {
  if (const CudaPlugin* p = try_cuda_plugin()) p->free(ptr, bytes, device);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  cuda_plugin().copy(dst, dst_device, src, src_device, bytes);
}

Kernels& kernels(int device) { return cuda_plugin().kernels(device); }

void* compute_stream(int device) { return cuda_plugin().compute_stream(device); }
void synchronize(int device) { cuda_plugin().synchronize(device); }
void set_device(int device) { cuda_plugin().set_device(device); }
std::string device_name(int device) { return cuda_plugin().device_name(device); }

MemoryStats memory_stats(int device) { return cuda_plugin().memory_stats(device); }
size_t peak_allocated_bytes(int device) { return cuda_plugin().peak_allocated_bytes(device); }
void reset_peak_memory(int device) { cuda_plugin().reset_peak_memory(device); }
void empty_cache(int device) { cuda_plugin().empty_cache(device); }

void* alloc_pinned_host(size_t bytes) { return cuda_plugin().alloc_pinned_host(bytes); }

void free_pinned_host(void* ptr) {
  if (const CudaPlugin* p = try_cuda_plugin()) p->free_pinned_host(ptr);
}

}  // namespace tandem::cuda
