// Collectives whose data lives on "the other side" of a backend: host data (a loss,
// checksums, a bucket order) through nccl, which takes only GPU buffers, and device
// tensors through mpi or gloo, which take only host buffers (staged through host
// memory, issue 7's "mpi backend for CUDA tensors"). Each call blocks until done.
#pragma once

#include <chrono>

#include "collectives/process_group.h"
#include "runtime/tensor.h"

namespace tandem {

// `host` is CPU memory; `device` is the training device (used to stage for nccl).
void host_allreduce(ProcessGroup& group, Buffer host, ReduceOp op, Device device, std::chrono::milliseconds timeout);
void host_allgather(ProcessGroup& group, Buffer host, Device device, std::chrono::milliseconds timeout);
void host_broadcast(ProcessGroup& group, Buffer host, int root, Device device, std::chrono::milliseconds timeout);
// Broadcasts a tensor (any device) from `root`, staging through the host if needed.
void tensor_broadcast(ProcessGroup& group, Tensor& tensor, int root, std::chrono::milliseconds timeout);

// A bucket's buffer that `group` reduces or gathers in place: the group's shared buffer
// where `shareable`, the tensor is on the host, the group has several ranks and it offers
// one (shm: its peers read the bucket where it lies, no copy in); else a private tensor.
// A collective call when shared: every rank asks for the same sizes in the same order.
Tensor bucket_buffer(ProcessGroup& group, int64_t numel, DType dtype, Device device, bool shareable);

inline Buffer buffer_of(const Tensor& t) { return Buffer{t.raw(), t.numel(), t.dtype(), t.device()}; }

}  // namespace tandem
