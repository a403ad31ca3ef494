// The NCCL backend: collectives on CUDA buffers, launched on a communication stream
// and completed by CUDA events (docs/architecture.md, "Streams on a GPU"):
//
//   compute stream:  ... produce grads [ready] ........ wait(done) -- optimizer
//   comm stream:               wait(ready) ncclAllReduce [done]
//
// Work::wait() makes the compute stream wait for `done` and returns at once; the host
// blocks only in Work::synchronize(timeout). The communicator is non-blocking
// (ncclConfig_t.blocking = 0), so no NCCL call can hang the host: every "in progress"
// state is polled with ncclCommGetAsyncError against a deadline. A watchdog thread
// polls outstanding ops; an async error or an op past the group's timeout aborts the
// communicator (ncclCommAbort) and every pending and later op fails with a message
// naming the op, its seq, its bytes and the ranks that have not reached it.
// The unique id goes through the store: rank 0 sets "nccl/uid", the others get it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/backends.h"
#include "collectives/process_group.h"

namespace tandem {

// "ncclAllReduce(...) failed: <reason> (<NCCL's last error>) at FILE:LINE (rank R, cuda:D)"
std::string nccl_failure(const char* statement, ncclResult_t rc, ncclComm_t comm, const char* file, int line,
                         int rank, int device);
std::string cuda_failure(const char* statement, cudaError_t rc, const char* file, int line, int rank, int device);

// State shared by the group, its Works and its watchdog. Every use of `comm` holds
// `mutex`, so an abort can never free it under another thread.
struct NcclShared {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  std::mutex mutex;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // the communication stream
  bool aborted = false;
  bool abort_was_timeout = false;
  std::string abort_reason;

  // Aborts the communicator once; later calls keep the first reason.
  void abort(const std::string& reason, bool timeout_caused);
  // Throws the abort reason if the communicator was aborted.
  void throw_if_aborted(const std::string& what);
  // With `mutex` held and comm set: ncclCommGetAsyncError's state (a failure of the call
  // itself counts as the state); sets `failure` to the message when the state is an error.
  ncclResult_t async_state_locked(std::string& failure);
  // Polls ncclCommGetAsyncError until it is no longer in progress, up to `deadline`;
  // aborts and throws on error or timeout.
  void wait_ready(const std::string& what, std::chrono::steady_clock::time_point deadline);
};

class NcclWork;

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // Creates the communicator (blocking the host at most args.timeout).
  explicit ProcessGroupNCCL(const BackendArgs& args);
  ~ProcessGroupNCCL() override;

  // The stream collectives wait for (inputs) and that Work::wait() makes wait
  // (outputs). Defaults to the legacy default stream.
  void set_compute_stream(cudaStream_t stream) { compute_stream_ = stream; }
  void use_compute_stream(void* stream) override { set_compute_stream(static_cast<cudaStream_t>(stream)); }
  cudaStream_t comm_stream() const { return shared_->stream; }

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;
  bool accepts(Device device) const override { return device.is_cuda() && device.index == shared_->device; }

 private:
  using Launch = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;
  std::shared_ptr<Work> launch(const Collective& c, const char* statement, const Launch& call);
  void watchdog_loop();

  std::shared_ptr<NcclShared> shared_;
  cudaStream_t compute_stream_ = nullptr;
  float* barrier_scratch_ = nullptr;  // one device float for barrier()

  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::deque<std::shared_ptr<NcclWork>> watched_;  // outstanding, in issue order
  bool stop_watchdog_ = false;
  std::thread watchdog_;
};

}  // namespace tandem
