// tandem_gpu_count: prints how many CUDA devices are visible and exits 0, or says why
// none is and exits 77 (CTest's skip code for the gpu tests).
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::fprintf(stderr, "skipping: no CUDA device visible (%s)\n",
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  std::printf("%d\n", count);
  return 0;
}
