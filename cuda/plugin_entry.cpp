// The CUDA plugin's one exported symbol (core/cuda_plugin.h): the table of the
// plugin's entry points, which runtime/cuda_forward.cpp, collectives/nccl/nccl_plugin.cpp
// and the collective benchmark call through. Everything else in libtandem_cuda.so is local
// (cuda/plugin.map), so these functions never bind to the program's forwarders of
// the same names, nor the program's to them.
#include <tandem/version.h>

#include "collectives/backends.h"
#include "collectives/bench/bench_harness.h"
#include "core/cuda_plugin.h"
#include "runtime/cuda_device.h"

namespace {

const tandem::CudaPlugin kTable = {
    tandem::kCudaPluginAbi,
    sizeof(tandem::CudaPlugin),
    TANDEM_VERSION_STRING,
    &tandem::cuda::device_count,
    &tandem::cuda::alloc,
    &tandem::cuda::free,
    &tandem::cuda::copy,
    &tandem::cuda::kernels,
    &tandem::cuda::compute_stream,
    &tandem::cuda::synchronize,
    &tandem::cuda::set_device,
    &tandem::cuda::device_name,
    &tandem::cuda::memory_stats,
    &tandem::cuda::peak_allocated_bytes,
    &tandem::cuda::reset_peak_memory,
    &tandem::cuda::empty_cache,
    &tandem::cuda::alloc_pinned_host,
    &tandem::cuda::free_pinned_host,
    &tandem::make_nccl_group,
    &tandem::bench::make_cuda_memory,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const tandem::CudaPlugin* tandem_cuda_plugin() { return &kTable; }
