// The CUDA plugin's ABI and its loader. libtandem_cuda.so (cuda/) holds every part of
// Tandem that calls the CUDA runtime, cuBLAS or NCCL (the CUDA device behind
// runtime/cuda_device.h, the nccl backend, the collective benchmark's device memory),
// built as a shared module and loaded with dlopen the first time a program needs a GPU.
// Programs link none of those libraries, so a CPU run of a CUDA build maps none of them
// (tests/cuda_plugin/).
//
// Invariants:
// - A process loads at most one plugin, once, and never unloads it: the objects it made
//   (device contexts, process groups) and their code live until exit.
// - A plugin is used only if its table says the same Tandem version and the same table
//   layout (kCudaPluginAbi, sizeof) as the program; any other is refused, naming both.
// - The plugin leaves every Tandem symbol it uses (ProcessGroup, Work, CollectiveError, ...)
//   undefined and binds it to the program's own copy: a CUDA build's programs export their
//   symbols (tandem_core's INTERFACE link option --export-dynamic). Its own definitions
//   stay local (a version script exports only the entry point), so they never meet the
//   program's forwarders of the same names. docs/architecture.md says why this rather
//   than a self-contained plugin.
//
// Both collectives/ (the nccl backend, tandem-bench-collectives' device memory) and
// runtime/ (the CUDA device) reach the plugin, so its ABI and loader are core's, below
// both; the table only names their types (declared here, defined above).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace tandem {

class Kernels;
class ProcessGroup;
struct BackendArgs;
namespace bench {
struct Memory;
}

namespace cuda {
// A device's caching-allocator counters (runtime/cuda_device.h's memory_stats()).
struct MemoryStats {
  size_t allocated_bytes = 0;       // live blocks handed out (rounded sizes)
  size_t peak_allocated_bytes = 0;  // maximum of allocated_bytes since start or reset
  size_t reserved_bytes = 0;        // obtained from cudaMalloc, live or cached
  uint64_t device_mallocs = 0;      // cudaMalloc calls so far (flat after warm-up)
  uint64_t cache_hits = 0;          // allocations served from the cache
  uint64_t pinned_host_allocs = 0;  // cudaHostAlloc calls by the H2D staging buffers
};
}  // namespace cuda

// Bump whenever CudaPlugin changes: a plugin of the same version string but another
// layout (a development build) is refused too.
inline constexpr uint32_t kCudaPluginAbi = 1;

// The entry point's table. The first three fields never move, so a plugin of any
// version can be asked what it is before anything else in it is read.
struct CudaPlugin {
  uint32_t abi;             // kCudaPluginAbi of the plugin's build
  uint32_t size;            // sizeof(CudaPlugin) there
  const char* version;      // TANDEM_VERSION_STRING there

  // runtime/cuda_device.h, one for one.
  int (*device_count)();
  void* (*alloc)(size_t bytes, int device);
  void (*free)(void* ptr, size_t bytes, int device);
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
  Kernels& (*kernels)(int device);
  void* (*compute_stream)(int device);
  void (*synchronize)(int device);
  void (*set_device)(int device);
  std::string (*device_name)(int device);
  cuda::MemoryStats (*memory_stats)(int device);
  size_t (*peak_allocated_bytes)(int device);
  void (*reset_peak_memory)(int device);
  void (*empty_cache)(int device);
  void* (*alloc_pinned_host)(size_t bytes);
  void (*free_pinned_host)(void* ptr);

  // collectives/backends.h: null when the plugin was built without NCCL.
  std::shared_ptr<ProcessGroup> (*make_nccl_group)(const BackendArgs& args);
  // collectives/bench/bench_harness.h's make_cuda_memory.
  std::unique_ptr<bench::Memory> (*make_bench_memory)(int device);
};

// The plugin's one exported symbol (extern "C", so no mangling ties it to a version).
inline constexpr const char* kCudaPluginEntry = "tandem_cuda_plugin";
using CudaPluginEntry = const CudaPlugin* (*)();

// The loaded plugin; loads it on the first call. Throws std::runtime_error saying why it
// cannot be used: not found (and where it looked), a library it needs is missing (the
// dynamic loader's words, e.g. "libcudart.so.13: cannot open shared object file"), or it
// belongs to another Tandem version.
const CudaPlugin& cuda_plugin();
// The same, for callers that only probe: null instead of throwing, and `why` (when given)
// receives the reason.
const CudaPlugin* try_cuda_plugin(std::string* why = nullptr);

}  // namespace tandem
