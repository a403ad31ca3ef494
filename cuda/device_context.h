// DeviceContext: everything Tandem keeps per CUDA device: the compute stream, the cuBLAS
// handle bound to it, the caching allocator, the H2D staging ring, the device-error
// block kernels report bad arguments through, and the Kernels instance.
//
// Invariant: created on first use of a device, never destroyed (the process exit
// reclaims the device; destroying CUDA objects from static destructors races the
// driver's own teardown). Every call for device d runs on context(d).stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "cuda/caching_allocator.h"
#include "cuda/launch.h"
#include "cuda/pinned_staging.h"
#include "runtime/kernels.h"

namespace tandem::cuda {

struct DeviceContext {
  explicit DeviceContext(int device);

  // cudaStreamSynchronize, then throws what a kernel reported (see check_device_error).
  void synchronize();
  // Throws std::invalid_argument for an error a kernel recorded (after a synchronize).
  void check_device_error();
  // Copies `bytes` of device memory to the host and waits (pageable or pinned dst).
  void download(void* dst, const void* src, size_t bytes);

  const int device;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  CachingAllocator allocator;
  PinnedStaging staging;
  launch::DeviceError* error_device = nullptr;  // written by kernels
  launch::DeviceError* error_host = nullptr;    // pinned mirror, refreshed after each checking kernel
  void* host_scalars = nullptr;                 // pinned, 64 bytes: sum / count results
  std::mutex scalar_mutex;                      // guards host_scalars and pending_slots

  // A pinned double and its event, for a value read after the step (Kernels::sum_later).
  // Slots are taken and given back; one is allocated only when none is free, so a steady
  // training loop allocates no pinned memory and frees none (cudaFreeHost would wait).
  struct PendingSlot {
    double* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  PendingSlot take_pending_slot();
  void give_back_pending_slot(PendingSlot slot);  // its copy must have landed
  std::vector<PendingSlot> pending_slots;         // free ones
  std::unique_ptr<Kernels> kernels;

  // Peers this device has been given direct access to (cudaDeviceEnablePeerAccess, once
  // per peer, on its first copy from it): DataParallel's copies then go device to device
  // over NVLink or PCIe instead of through the host.
  std::mutex peer_mutex;
  std::vector<int> peers_checked;
};

// The context of `device`, created on first use. Throws std::invalid_argument naming the
// visible device count for an index out of range.
DeviceContext& context(int device);

// Makes `device` current for the calling thread when it is not already.
void ensure_current(int device);

}  // namespace tandem::cuda
