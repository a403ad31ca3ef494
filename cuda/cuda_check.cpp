// Formats CUDA and cuBLAS failures with the statement, file, line, rank and device.
#include "cuda/cuda_check.h"

#include <cstdlib>
#include <stdexcept>

namespace tandem::cuda {

std::string where(int device) {
  if (device < 0) {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess) device = current;
  }
  std::string dev = device >= 0 ? "cuda:" + std::to_string(device) : std::string("cuda:?");
  const char* rank = std::getenv("RANK");
  if (!rank) rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank && *rank ? "(rank " + std::string(rank) + ", " + dev + ")" : "(" + dev + ")";
}

static std::string location(const char* file, int line) {
  // Keep the path from the repository root: "cuda/x.cpp", not the build machine's.
  std::string f(file);
  const size_t at = f.rfind("cuda/");
  if (at != std::string::npos) f = f.substr(at);
  return f + ":" + std::to_string(line);
}

void throw_cuda_error(const char* statement, cudaError_t rc, const char* file, int line, int device) {
  throw std::runtime_error(std::string(statement) + " failed: " + cudaGetErrorName(rc) + " (" +
                           cudaGetErrorString(rc) + ") at " + location(file, line) + " " + where(device));
}

void throw_cublas_error(const char* statement, cublasStatus_t rc, const char* file, int line, int device) {
  throw std::runtime_error(std::string(statement) + " failed: " + cublasGetStatusName(rc) + " (" +
                           cublasGetStatusString(rc) + ") at " + location(file, line) + " " + where(device));
}

}  // namespace tandem::cuda
