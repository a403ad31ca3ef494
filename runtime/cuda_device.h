// The CUDA entry points the device-agnostic runtime calls. In a CUDA build
// runtime/cuda_forward.cpp forwards each to the CUDA plugin (cuda/, built as
// libtandem_cuda.so and loaded on the first call: core/cuda_plugin.h);
// runtime/cuda_unavailable.cpp otherwise, where each one throws a message saying the build
// has no CUDA; tests/emulated/ links a host-memory stand-in. device_count() and
// unavailable_reason() only probe: 0 and a reason where CUDA cannot be used, never a throw.
//
// Streams: every device has one compute stream (non-blocking: it never waits for the
// legacy default stream). Every kernel, copy and cuBLAS call for that device runs on it,
// in issue order, so device memory freed on the host can be handed to the next
// allocation at once (stream-ordered reuse). Work on any other stream (a communication
// stream) must be joined back into the compute stream with an event before the buffers
// it touched are freed; ProcessGroupNCCL does so when it is given this stream through
// set_compute_stream(static_cast<cudaStream_t>(compute_stream(device))).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda_plugin.h"
#include "runtime/tensor.h"

namespace tandem {
class Kernels;
namespace cuda {

// Visible CUDA devices; 0 (not an error) when there is no driver or no GPU, when this
// build has no CUDA, or when the CUDA plugin cannot be loaded.
int device_count();
// Why this process cannot use CUDA at all: "" when it can (whether or not a GPU is
// visible), else e.g. "this Tandem build has no CUDA support" or the plugin loader's
// message naming the missing library. For error messages after device_count() == 0.
std::string unavailable_reason();
void* alloc(size_t bytes, int device);
void free(void* ptr, size_t bytes, int device);
// Host<->device copies return when the host buffer may be reused (device->host: when the
// data has arrived); device->device copies are ordered on the streams, not waited for.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
Kernels& kernels(int device);

// --- streams and devices -----------------------------------------------------------
// The device's compute stream, as a cudaStream_t (void* keeps CUDA headers out of here).
void* compute_stream(int device);
// Waits for everything issued on the device's compute stream; reports a kernel-detected
// argument error (a label outside [0, C)) as std::invalid_argument.
void synchronize(int device);
// Makes `device` current for the calling thread (cudaSetDevice); a DDP rank calls it with
// its LOCAL_RANK before creating anything on the GPU. Throws naming the visible count.
void set_device(int device);
// "NVIDIA H200 (sm_90, 139.8 GiB)"
std::string device_name(int device);

// --- memory (the caching allocator) ------------------------------------------------
// MemoryStats: core/cuda_plugin.h (the plugin's table returns it).
MemoryStats memory_stats(int device);
size_t peak_allocated_bytes(int device);
void reset_peak_memory(int device);
// Returns cached, unused blocks to the driver (after synchronising the device).
void empty_cache(int device);

// --- pinned host memory ------------------------------------------------------------
// Page-locked host memory (cudaHostAlloc, portable across devices), for staging
// device buffers through the host (the mpi backend with CUDA tensors). Where the driver
// refuses to pin, pageable memory instead (logged once): copy() to and from it is complete
// when it returns either way, so only the speed differs. Free it with free_pinned_host.
void* alloc_pinned_host(size_t bytes);
void free_pinned_host(void* ptr);

}  // namespace cuda
}  // namespace tandem
