// Device memory for the nccl benchmark: cudaMalloc'd buffers, copies through the
// CUDA runtime. Only compiled when CUDA is on.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "collectives/bench/bench_harness.h"

namespace tandem::bench {

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(rc));
}

class CudaMemory : public Memory {
 public:
  explicit CudaMemory(int index) : index_(index) { check(cudaSetDevice(index), "cudaSetDevice"); }
  Device device() const override { return Device::cuda(index_); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes + 4096), "cudaMalloc");
    return p;
  }
  void free(void* p) override { cudaFree(p); }
  // Synchronous copies: the harness copies only outside timed regions.
  void to_device(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  int index_;
};

}  // namespace

std::unique_ptr<Memory> make_cuda_memory(int device_index) { return std::make_unique<CudaMemory>(device_index); }

}  // namespace tandem::bench
