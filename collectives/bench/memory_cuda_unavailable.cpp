// No device memory: this build has no CUDA (the nccl benchmark needs it).
#include <stdexcept>

#include "collectives/bench/bench_harness.h"

namespace tandem::bench {

std::unique_ptr<Memory> make_cuda_memory(int) {
  throw std::runtime_error("this build has no CUDA: configure with -DTANDEM_WITH_CUDA=ON to benchmark nccl");
}

}  // namespace tandem::bench
