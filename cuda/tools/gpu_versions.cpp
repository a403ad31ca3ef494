// tandem-gpu-versions: what the machine's GPU stack is, as the libraries this build loads
// report it at run time (not only what the headers said at build time): the driver's CUDA
// version, the CUDA runtime, cuBLAS (cublasGetProperty), NCCL (NCCL_VERSION_CODE from the
// header and ncclGetVersion from the library, where this build has the nccl backend), and
// each visible GPU. scripts/gpu-check prints it first, so a report says what it ran on.
// Exit 1 when no GPU is visible (after printing what it could), else 0.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef TANDEM_GPU_VERSIONS_NCCL
#include <nccl.h>
#endif

#include <cstdio>

namespace {

// 13000 -> "13.0", 12080 -> "12.8" (CUDA's encoding: 1000 * major + 10 * minor).
void print_cuda_version(const char* what, int v) {
  std::printf("%-22s %d.%d (%d)\n", what, v / 1000, (v % 1000) / 10, v);
}

}  // namespace

int main() {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    print_cuda_version("driver (CUDA version)", driver);
  else
    std::printf("%-22s none (no NVIDIA driver loaded)\n", "driver (CUDA version)");
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) print_cuda_version("CUDA runtime", runtime);
  print_cuda_version("CUDA runtime (header)", CUDART_VERSION);

  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    std::printf("%-22s %d.%d.%d (library), %d.%d.%d (header)\n", "cuBLAS", major, minor, patch, CUBLAS_VER_MAJOR,
                CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
  else
    std::printf("%-22s library version unavailable, %d.%d.%d (header)\n", "cuBLAS", CUBLAS_VER_MAJOR,
                CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);

#ifdef TANDEM_GPU_VERSIONS_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    std::printf("%-22s %d (library, ncclGetVersion), %d (header, NCCL_VERSION_CODE)%s\n", "NCCL", nccl,
                NCCL_VERSION_CODE, nccl == NCCL_VERSION_CODE ? "" : ": they differ");
  else
    std::printf("%-22s ncclGetVersion failed, %d (header, NCCL_VERSION_CODE)\n", "NCCL", NCCL_VERSION_CODE);
#else
  std::printf("%-22s not in this build (TANDEM_WITH_NCCL=OFF or no NCCL found)\n", "NCCL");
#endif

  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::printf("%-22s none visible (%s)\n", "GPU", rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    return 1;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      std::printf("GPU %-18d properties unavailable\n", d);
      continue;
    }
    std::printf("GPU %-18d %s, sm_%d%d, %.1f GiB, %d SMs\n", d, p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), p.multiProcessorCount);
  }
  return 0;
}
