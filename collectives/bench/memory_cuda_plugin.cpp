// Device memory for the nccl benchmark in a CUDA build: cuda/bench_memory.cpp lives in the CUDA
// plugin with the rest of the code that calls the CUDA runtime; this loads it on the first
// nccl row, so the benchmark's CPU rows never map CUDA.
#include "collectives/bench/bench_harness.h"
#include "core/cuda_plugin.h"

namespace tandem::bench {

std::unique_ptr<Memory> make_cuda_memory(int device_index) { return cuda_plugin().make_bench_memory(device_index); }

}  // namespace tandem::bench
