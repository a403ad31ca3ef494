// tandem_gpu_count: prints how many CUDA devices are visible and exits 0, or says why
// none is and exits 77 (CTest's skip code for the gpu tests). It asks through the CUDA
// plugin, as the programs do, so it links no CUDA library itself and also checks that the
// plugin is found from the build tree's binaries.
#include <cstdio>
#include <string>

#include "runtime/cuda_device.h"

int main() {
  const int count = tandem::cuda::device_count();
  if (count == 0) {
    const std::string why = tandem::cuda::unavailable_reason();
    std::fprintf(stderr, "skipping: no CUDA device visible (%s)\n",
                 why.empty() ? "the CUDA runtime reports none" : why.c_str());
    return 77;
  }
  std::printf("%d\n", count);
  return 0;
}
