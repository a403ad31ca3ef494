// Error checks for the CUDA runtime and cuBLAS, shared by the .cpp and .cu files of
// cuda/. A failed call throws std::runtime_error naming the statement, its
// error, file:line, the device and the rank (from $RANK when a launcher set it):
//
//   cudaMalloc(&p, bytes) failed: out of memory at cuda/caching_allocator.cpp:88 (rank 1, cuda:0)
//
// Invariant: host-only and C++17, so nvcc compiles it without the C++20 runtime headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace tandem::cuda {

// "(rank R, cuda:D)" or "(cuda:D)" when RANK is unset; D = -1 prints the current device.
std::string where(int device);

[[noreturn]] void throw_cuda_error(const char* statement, cudaError_t rc, const char* file, int line, int device);
[[noreturn]] void throw_cublas_error(const char* statement, cublasStatus_t rc, const char* file, int line,
                                     int device);

}  // namespace tandem::cuda

// `device` is the device index the call was for (-1: the thread's current device).
#define TANDEM_CUDA_CHECK(statement, device)                                                 \
  do {                                                                                       \
    const cudaError_t tandem_cuda_rc_ = (statement);                                         \
    if (tandem_cuda_rc_ != cudaSuccess)                                                      \
      ::tandem::cuda::throw_cuda_error(#statement, tandem_cuda_rc_, __FILE__, __LINE__, (device)); \
  } while (0)

#define TANDEM_CUBLAS_CHECK(statement, device)                                                 \
  do {                                                                                         \
    const cublasStatus_t tandem_cublas_rc_ = (statement);                                      \
    if (tandem_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::tandem::cuda::throw_cublas_error(#statement, tandem_cublas_rc_, __FILE__, __LINE__, (device)); \
  } while (0)

// A call whose failure is deliberately ignored (a free, a destroy, a wait in a destructor or
// on a cleanup path). The CUDA runtime keeps a failed call's error as the thread's last
// error, so ignoring it would let the next TANDEM_CUDA_CHECK_LAUNCH blame an innocent
// kernel launch: a failure is consumed here. A success leaves the last error alone, so an
// earlier launch's error still reaches its own check.
#define TANDEM_CUDA_IGNORE(statement)                                 \
  do {                                                                \
    if ((statement) != cudaSuccess) (void)cudaGetLastError();         \
  } while (0)

// After a kernel launch: a bad configuration (or an earlier asynchronous fault) shows here.
#define TANDEM_CUDA_CHECK_LAUNCH(kernel_name)                                                  \
  do {                                                                                         \
    const cudaError_t tandem_cuda_rc_ = cudaGetLastError();                                    \
    if (tandem_cuda_rc_ != cudaSuccess)                                                        \
      ::tandem::cuda::throw_cuda_error("launch of " #kernel_name, tandem_cuda_rc_, __FILE__, __LINE__, -1); \
  } while (0)
