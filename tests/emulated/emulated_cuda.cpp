// An emulated CUDA device for tests: runtime/cuda_device.h implemented on host memory and
// the CPU kernels, linked into tandem-train-emulated in place of the real device.
//
// What it covers: every device-agnostic branch on Device::is_cuda() (the trainer's
// --device cuda handling, LOCAL_RANK to GPU, DataParallel over several devices, DDP
// staging GPU buckets through pinned host memory for mpi and gloo, checkpoints written
// from and loaded onto a device, the summary's device figures) runs in CI, on real
// processes, with results that must equal the CPU's bit for bit.
// What it cannot cover: CUDA itself (streams, events, kernels, NCCL): tests/gpu and
// scripts/gpu-check do, on a GPU. Device memory is host memory here, so a host read of
// device memory goes unnoticed; every block handed out is filled with NaN bytes, so a
// read of memory nothing wrote does not. Released blocks are cached by exact size, so
// the memory figures behave like the real caching allocator's (no new blocks once a
// training loop is warm).
//
// TANDEM_EMULATED_GPUS sets the device count (default 2; 0 acts as a machine without GPUs).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/cpu_kernels_impl.h"
#include "runtime/cuda_device.h"

namespace tandem::cuda {

namespace {

struct EmulatedDevices {
  std::mutex mutex;
  std::deque<cpu::CpuKernels> kernels;  // deque: stable addresses
  std::vector<MemoryStats> stats;
  std::unordered_map<void*, std::pair<int, size_t>> blocks;  // live: ptr -> (device, bytes)
  // Released blocks by (device, exact size), handed out again as the real caching
  // allocator would: device_mallocs stays flat once a loop asks for the same sizes.
  std::multimap<std::pair<int, size_t>, void*> cached;

  EmulatedDevices() {
    const char* env = std::getenv("TANDEM_EMULATED_GPUS");
    const int n = env && *env ? std::atoi(env) : 2;
    for (int d = 0; d < n; ++d) kernels.emplace_back(Device::cuda(d));
    stats.resize(static_cast<size_t>(n));
  }
};

EmulatedDevices& devices() {
  static EmulatedDevices instance;
  return instance;
}

void check_index(int device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::invalid_argument("cuda:" + std::to_string(device) + " requested, but " + std::to_string(n) +
                                " emulated CUDA device(s) exist (TANDEM_EMULATED_GPUS)");
}

}  // namespace

int device_count() { return static_cast<int>(devices().kernels.size()); }

void* alloc(size_t bytes, int device) {
  check_index(device);
  if (bytes == 0) return nullptr;
  EmulatedDevices& e = devices();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    MemoryStats& s = e.stats[static_cast<size_t>(device)];
    auto hit = e.cached.find({device, bytes});
    if (hit != e.cached.end()) {
      p = hit->second;
      e.cached.erase(hit);
      ++s.cache_hits;
    } else {
      p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
      if (!p) throw std::bad_alloc();
      s.reserved_bytes += bytes;
      ++s.device_mallocs;
    }
    e.blocks[p] = {device, bytes};
    s.allocated_bytes += bytes;
    s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  }
  std::memset(p, 0xff, bytes);  // NaN in every float, new or reused: reads of unwritten memory show
  return p;
}

void free(void* ptr, size_t, int device) {
  if (!ptr) return;
  EmulatedDevices& e = devices();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.blocks.find(ptr);
    if (it == e.blocks.end() || it->second.first != device) {
      std::fprintf(stderr, "emulated cuda: free of %p on cuda:%d, which it does not hold\n", ptr, device);
      std::abort();  // a double free or a free on the wrong device: a bug worth a core
    }
    e.stats[static_cast<size_t>(device)].allocated_bytes -= it->second.second;
    e.cached.emplace(it->second, ptr);
    e.blocks.erase(it);
  }
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (dst_device.is_cuda()) check_index(dst_device.index);
  if (src_device.is_cuda()) check_index(src_device.index);
  if (bytes) std::memcpy(dst, src, bytes);
}

Kernels& kernels(int device) {
  check_index(device);
  return devices().kernels[static_cast<size_t>(device)];
}

void* compute_stream(int device) {
  check_index(device);
  return nullptr;
}

void synchronize(int device) { check_index(device); }

void set_device(int device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::invalid_argument("cannot use cuda:" + std::to_string(device) + ": " + std::to_string(n) +
                                " emulated CUDA device(s) exist (TANDEM_EMULATED_GPUS)");
}

std::string device_name(int device) {
  check_index(device);
  return "emulated GPU " + std::to_string(device) + " (host memory, CPU kernels)";
}

MemoryStats memory_stats(int device) {
  check_index(device);
  std::lock_guard<std::mutex> lock(devices().mutex);
  return devices().stats[static_cast<size_t>(device)];
}

size_t peak_allocated_bytes(int device) { return memory_stats(device).peak_allocated_bytes; }

void reset_peak_memory(int device) {
  check_index(device);
  std::lock_guard<std::mutex> lock(devices().mutex);
  MemoryStats& s = devices().stats[static_cast<size_t>(device)];
  s.peak_allocated_bytes = s.allocated_bytes;
}

void empty_cache(int device) {
  check_index(device);
  EmulatedDevices& e = devices();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (auto it = e.cached.begin(); it != e.cached.end();) {
    if (it->first.first != device) {
      ++it;
      continue;
    }
    e.stats[static_cast<size_t>(device)].reserved_bytes -= it->first.second;
    std::free(it->second);
    it = e.cached.erase(it);
  }
}

void* alloc_pinned_host(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void free_pinned_host(void* ptr) { std::free(ptr); }

}  // namespace tandem::cuda
