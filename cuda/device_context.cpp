// Per-device state and its registry (see device_context.h).
#include "cuda/device_context.h"

#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "runtime/cuda_device.h"

namespace tandem::cuda {

namespace {

// cuBLAS's recommended workspace on Hopper; taken from the caching allocator so that
// cuBLAS never calls cudaMalloc inside a step.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;

}  // namespace

void ensure_current(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device)
    TANDEM_CUDA_CHECK(cudaSetDevice(device), device);
}

DeviceContext::DeviceContext(int d) : device(d), allocator(d), staging(d, allocator) {
  TANDEM_CUDA_CHECK(cudaSetDevice(d), d);
  // Non-blocking: never serialised against the legacy default stream that libraries and
  // stray cudaMemcpy calls use.
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), d);
  TANDEM_CUBLAS_CHECK(cublasCreate(&cublas), d);
  TANDEM_CUBLAS_CHECK(cublasSetStream(cublas, stream), d);  // resets the workspace: set it after
  TANDEM_CUBLAS_CHECK(cublasSetWorkspace(cublas, allocator.allocate(kCublasWorkspaceBytes), kCublasWorkspaceBytes),
                      d);
  // FP32 GEMMs stay FP32 (no TF32), so CUDA matches the CPU to float rounding; PyTorch's
  // default (torch.backends.cuda.matmul.allow_tf32 = False) is the same. Kernels::set_tf32
  // (tandem-train --tf32) trades that for tensor-core speed.
  TANDEM_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH), d);

  error_device = static_cast<launch::DeviceError*>(allocator.allocate(sizeof(launch::DeviceError)));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(error_device, 0, sizeof(launch::DeviceError), stream), d);
  TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&error_host), sizeof(launch::DeviceError),
                                  cudaHostAllocPortable),
                    d);
  std::memset(error_host, 0, sizeof(launch::DeviceError));
  TANDEM_CUDA_CHECK(cudaHostAlloc(&host_scalars, 64, cudaHostAllocPortable), d);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream), d);
  kernels = std::make_unique<CudaKernels>(*this);
}

DeviceContext::PendingSlot DeviceContext::take_pending_slot() {
  {
    std::lock_guard<std::mutex> lock(scalar_mutex);
    if (!pending_slots.empty()) {
      PendingSlot slot = pending_slots.back();
      pending_slots.pop_back();
      return slot;
    }
  }
  ensure_current(device);
  PendingSlot slot;
  TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slot.host), sizeof(double), cudaHostAllocPortable),
                    device);
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), device);
  return slot;
}

void DeviceContext::give_back_pending_slot(PendingSlot slot) {
  std::lock_guard<std::mutex> lock(scalar_mutex);
  pending_slots.push_back(slot);
}

void DeviceContext::synchronize() {
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream), device);
  check_device_error();
}

void DeviceContext::check_device_error() {
  if (error_host->code == 0) return;
  const launch::DeviceError e = *error_host;
  std::memset(error_host, 0, sizeof(launch::DeviceError));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(error_device, 0, sizeof(launch::DeviceError), stream), device);
  // The CPU kernel's message, plus where.
  throw std::invalid_argument("softmax_xent_forward: label " + std::to_string(e.label) + " in row " +
                              std::to_string(e.row) + " is outside [0, " + std::to_string(e.limit) + ") " +
                              where(device));
}

void DeviceContext::download(void* dst, const void* src, size_t bytes) {
  ensure_current(device);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), device);
  synchronize();
}

DeviceContext& context(int device) {
  // Lock-free once created: alloc/free/copy look the context up on every call.
  static std::array<std::atomic<DeviceContext*>, kMaxDevices> contexts{};
  static std::mutex create_mutex;
  if (device >= 0 && device < kMaxDevices) {
    if (DeviceContext* c = contexts[device].load(std::memory_order_acquire)) return *c;
  }
  std::lock_guard<std::mutex> lock(create_mutex);
  const int count = device_count();
  if (device < 0 || device >= count || device >= kMaxDevices)
    throw std::invalid_argument(
        "cuda:" + std::to_string(device) + " requested, but " +
        (count == 0 ? std::string("no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)")
                    : std::to_string(count) + " CUDA device(s) are visible: cuda:0..cuda:" +
                          std::to_string(count - 1)));
  if (DeviceContext* c = contexts[device].load(std::memory_order_acquire)) return *c;
  auto* created = new DeviceContext(device);  // never deleted: see device_context.h
  contexts[device].store(created, std::memory_order_release);
  return *created;
}

}  // namespace tandem::cuda
