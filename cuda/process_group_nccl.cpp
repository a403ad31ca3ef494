// ProcessGroupNCCL (see process_group_nccl.h for the stream picture and the rules).
#include "cuda/process_group_nccl.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>

#include <spdlog/spdlog.h>

namespace tandem {

const bool kNcclBuilt = true;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Error macros: statement, file, line, rank and device in every message.
#define TANDEM_CUDA_CHECK(shared, statement)                                                         \
  do {                                                                                               \
    const cudaError_t tandem_cuda_rc_ = (statement);                                                 \
    if (tandem_cuda_rc_ != cudaSuccess) {                                                            \
      throw CollectiveError(                                                                         \
          cuda_failure(#statement, tandem_cuda_rc_, __FILE__, __LINE__, (shared).rank, (shared).device)); \
    }                                                                                                \
  } while (0)

#define TANDEM_NCCL_CHECK(shared, comm, statement)                                                           \
  do {                                                                                                       \
    const ncclResult_t tandem_nccl_rc_ = (statement);                                                        \
    if (tandem_nccl_rc_ != ncclSuccess && tandem_nccl_rc_ != ncclInProgress) {                               \
      throw CollectiveError(nccl_failure(#statement, tandem_nccl_rc_, (comm), __FILE__, __LINE__, (shared).rank, \
                                         (shared).device));                                                  \
    }                                                                                                        \
  } while (0)

std::string nccl_failure(const char* statement, ncclResult_t rc, ncclComm_t comm, const char* file, int line,
                         int rank, int device) {
  const char* last = ncclGetLastError(comm);
  return std::string(statement) + " failed: " + ncclGetErrorString(rc) +
         (last && *last ? std::string(" (") + last + ")" : std::string()) + " at " + file + ":" +
         std::to_string(line) + " (rank " + std::to_string(rank) + ", cuda:" + std::to_string(device) + ")";
}

std::string cuda_failure(const char* statement, cudaError_t rc, const char* file, int line, int rank, int device) {
  return std::string(statement) + " failed: " + cudaGetErrorString(rc) + " at " + file + ":" + std::to_string(line) +
         " (rank " + std::to_string(rank) + ", cuda:" + std::to_string(device) + ")";
}

namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

// Sleeps between polls of a device state; short, since these waits guard the host.
void poll_pause() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }

// cudaEventQuery / cudaStreamQuery also leave cudaErrorNotReady in the calling thread's
// last-error slot. Left there, the next kernel launch check on this thread (the training
// thread: cudaGetLastError after each launch) would fail with "device not ready".
// Clears that value and only that one.
void forget_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
}

}  // namespace

// ---- NcclShared ----

void NcclShared::abort(const std::string& reason, bool timeout_caused) {
  std::lock_guard<std::mutex> lock(mutex);
  if (aborted) return;
  aborted = true;
  abort_was_timeout = timeout_caused;
  abort_reason = reason;
  spdlog::error("nccl rank {}: aborting the communicator: {}", rank, reason);
  if (comm) ncclCommAbort(comm);  // also unblocks kernels waiting for absent peers
  comm = nullptr;
}

void NcclShared::throw_if_aborted(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!aborted) return;
  const std::string msg = what + ": the NCCL communicator was aborted (" + abort_reason + ")";
  if (abort_was_timeout) throw CollectiveTimeout(msg);
  throw CollectiveError(msg);
}

ncclResult_t NcclShared::async_state_locked(std::string& failure) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
  if (rc != ncclSuccess) state = rc;
  if (state != ncclSuccess && state != ncclInProgress)
    failure = nccl_failure("ncclCommGetAsyncError(comm, &state)", state, comm, __FILE__, __LINE__, rank, device);
  return state;
}

void NcclShared::wait_ready(const std::string& what, Clock::time_point deadline) {
  for (;;) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (aborted) break;
      if (async_state_locked(failure) == ncclSuccess) return;
    }
    if (!failure.empty()) {
      abort(what + ": " + failure, false);
      break;
    }
    if (Clock::now() > deadline) {
      abort(what + ": still in progress after " + std::to_string(timeout.count()) + " ms (rank " +
                std::to_string(rank) + ", cuda:" + std::to_string(device) + ")",
            true);
      break;
    }
    poll_pause();
  }
  throw_if_aborted(what);
}

// ---- NcclWork ----

// A collective on the comm stream; `done` is recorded right after it.
class NcclWork : public Work {
 public:
  using TimeoutReporter = std::function<std::string(const Collective&, milliseconds)>;
  using FailureReporter = std::function<std::string(const Collective&, const std::string&)>;

  NcclWork(const Collective& c, milliseconds default_timeout, std::shared_ptr<NcclShared> shared, cudaEvent_t done,
           cudaStream_t compute, Clock::time_point deadline, TimeoutReporter on_timeout, FailureReporter on_failure)
      : Work(c, default_timeout),
        shared_(std::move(shared)),
        done_(done),
        compute_(compute),
        deadline_(deadline),
        on_timeout_(std::move(on_timeout)),
        on_failure_(std::move(on_failure)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }  // legal while pending: freed when it fires

  // Device-side wait: the compute stream waits for `done`; the host does not block,
  // so `timeout` cannot be enforced here: the watchdog enforces the group's timeout.
  using Work::wait;
  void wait(milliseconds) override {
    if (done()) return;
    shared_->throw_if_aborted(collective_.describe());
    TANDEM_CUDA_CHECK(*shared_, cudaStreamWaitEvent(compute_, done_, 0));
  }

  void synchronize(milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (done()) return;
      shared_->throw_if_aborted(collective_.describe());
      check_async_error();
      if (Clock::now() > deadline) {
        shared_->abort(on_timeout_(collective_, timeout), true);
        shared_->throw_if_aborted(collective_.describe());
      }
      poll_pause();
    }
  }

  bool is_completed() const override {
    if (done()) return true;
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->aborted;
  }

  std::exception_ptr exception() const override {
    if (done()) return nullptr;
    try {
      shared_->throw_if_aborted(collective_.describe());
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  // Polls the event; once seen complete (before any abort) the op has succeeded.
  bool done() const {
    if (observed_done_) return true;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->aborted) return false;  // kernels were torn down: results unknown
    }
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) observed_done_ = true;
    else if (q == cudaErrorNotReady) forget_not_ready();
    else {
      shared_->abort(on_failure_(collective_, cuda_failure("cudaEventQuery(done)", q, __FILE__, __LINE__,
                                                           shared_->rank, shared_->device)),
                     false);
    }
    return observed_done_;
  }

  void check_async_error() {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->aborted || !shared_->comm) return;
      shared_->async_state_locked(failure);
    }
    if (!failure.empty()) shared_->abort(on_failure_(collective_, failure), false);
  }

  Clock::time_point deadline() const { return deadline_; }

 private:
  std::shared_ptr<NcclShared> shared_;
  cudaEvent_t done_;
  cudaStream_t compute_;
  Clock::time_point deadline_;
  TimeoutReporter on_timeout_;
  FailureReporter on_failure_;
  mutable std::atomic<bool> observed_done_{false};
};

// ---- ProcessGroupNCCL ----

ProcessGroupNCCL::ProcessGroupNCCL(const BackendArgs& args)
    : ProcessGroup(Setup{"nccl", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}),
      shared_(std::make_shared<NcclShared>()) {
  NcclShared& s = *shared_;
  s.rank = args.rank;
  s.size = args.size;
  s.device = args.device.index;
  s.timeout = args.timeout;
  if (!args.store) throw CollectiveError("the nccl backend needs a store to share its unique id");
  TANDEM_CUDA_CHECK(s, cudaSetDevice(s.device));
  ncclUniqueId id;
  if (s.rank == 0) {
    TANDEM_NCCL_CHECK(s, nullptr, ncclGetUniqueId(&id));
    args.store->set("nccl/uid", std::string_view(id.internal, NCCL_UNIQUE_ID_BYTES));
  } else {
    const std::string uid = args.store->get("nccl/uid", args.timeout);
    if (uid.size() != NCCL_UNIQUE_ID_BYTES) {
      throw CollectiveError("nccl: the unique id in the store has " + std::to_string(uid.size()) + " bytes, not " +
                            std::to_string(NCCL_UNIQUE_ID_BYTES));
    }
    std::memcpy(id.internal, uid.data(), NCCL_UNIQUE_ID_BYTES);
  }
  // Non-blocking: the comm stream does not synchronise with the legacy default stream,
  // so every dependency is an explicit event.
  TANDEM_CUDA_CHECK(s, cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  try {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // no NCCL call may block the host beyond our deadlines
    ncclComm_t comm = nullptr;
    TANDEM_NCCL_CHECK(s, nullptr, ncclCommInitRankConfig(&comm, s.size, id, s.rank, &config));
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.comm = comm;
    }
    s.wait_ready("ncclCommInitRankConfig on rank " + std::to_string(s.rank), Clock::now() + args.timeout);
    TANDEM_CUDA_CHECK(s, cudaMalloc(reinterpret_cast<void**>(&barrier_scratch_), sizeof(float)));
  } catch (...) {
    // The destructor will not run: release what was created (abort is a no-op if done).
    s.abort("the process group could not be created", false);
    cudaStreamDestroy(s.stream);
    throw;
  }
  watchdog_ = std::thread(&ProcessGroupNCCL::watchdog_loop, this);
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    stop_watchdog_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  NcclShared& s = *shared_;
  cudaSetDevice(s.device);
  // Let issued ops finish (bounded by the timeout), then finalize; abort otherwise. The
  // watchdog has stopped, so this loop watches for NCCL errors itself: a peer that died
  // with ops in flight aborts at once rather than after the whole timeout.
  const auto deadline = Clock::now() + s.timeout;
  bool idle = false;
  while (!idle) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.aborted) break;
      if (s.comm) s.async_state_locked(failure);
    }
    if (!failure.empty()) {
      s.abort("the process group was destroyed with collectives in flight: " + failure, false);
      break;
    }
    idle = cudaStreamQuery(s.stream) != cudaErrorNotReady;
    if (!idle) forget_not_ready();
    if (!idle && Clock::now() > deadline) {
      s.abort("the process group was destroyed with collectives still running after " +
                  std::to_string(s.timeout.count()) + " ms",
              true);
      break;
    }
    if (!idle) poll_pause();
  }
  if (idle) {
    ncclResult_t rc;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      rc = ncclCommFinalize(s.comm);
    }
    try {
      if (rc == ncclSuccess || rc == ncclInProgress) s.wait_ready("ncclCommFinalize", deadline);
    } catch (const std::exception& e) {
      spdlog::warn("nccl rank {}: {}", s.rank, e.what());
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted && s.comm) ncclCommDestroy(s.comm);
    s.comm = nullptr;
  }
  if (barrier_scratch_) cudaFree(barrier_scratch_);
  if (s.stream) cudaStreamDestroy(s.stream);
}

std::shared_ptr<Work> ProcessGroupNCCL::launch(const Collective& c, const char* statement, const Launch& call) {
  NcclShared& s = *shared_;
  const std::string what = c.describe();
  s.throw_if_aborted(what);
  TANDEM_CUDA_CHECK(s, cudaSetDevice(s.device));
  // The comm stream waits for the inputs the compute stream is producing.
  cudaEvent_t ready = nullptr, done = nullptr;
  TANDEM_CUDA_CHECK(s, cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  const cudaError_t created = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (created != cudaSuccess) cudaEventDestroy(ready);
  TANDEM_CUDA_CHECK(s, created);
  std::unique_ptr<CUevent_st, cudaError_t (*)(cudaEvent_t)> ready_guard(ready, cudaEventDestroy);
  std::unique_ptr<CUevent_st, cudaError_t (*)(cudaEvent_t)> done_guard(done, cudaEventDestroy);
  TANDEM_CUDA_CHECK(s, cudaEventRecord(ready, compute_stream_));
  TANDEM_CUDA_CHECK(s, cudaStreamWaitEvent(s.stream, ready, 0));

  ncclResult_t rc = ncclSuccess;
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.aborted) {
      rc = call(s.comm, s.stream);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        failure = nccl_failure(statement, rc, s.comm, __FILE__, __LINE__, s.rank, s.device);
      }
    }
  }
  if (!failure.empty()) s.abort(reports()->failure(c, failure), false);
  s.throw_if_aborted(what);
  const auto deadline = Clock::now() + timeout();
  if (rc == ncclInProgress) s.wait_ready(what, deadline);
  TANDEM_CUDA_CHECK(s, cudaEventRecord(done, s.stream));

  // The watchdog calls these: they hold the reports, never the group (see FailureReports).
  auto on_timeout = [reports = reports()](const Collective& op, milliseconds waited) {
    return reports->timeout(op, waited);
  };
  auto on_failure = [reports = reports()](const Collective& op, const std::string& error) {
    return reports->failure(op, error);
  };
  auto work = std::make_shared<NcclWork>(c, timeout(), shared_, done_guard.release(), compute_stream_, deadline,
                                         on_timeout, on_failure);
  reports()->recorder().started(c.seq);  // on the stream now: when the device starts it is not observed
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watched_.push_back(work);
  }
  return work;
}

void ProcessGroupNCCL::watchdog_loop() {
  cudaSetDevice(shared_->device);
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!stop_watchdog_) {
    // A poll: device completion has no host callback we could block on safely.
    watch_cv_.wait_for(lock, milliseconds(100), [&] { return stop_watchdog_; });
    if (stop_watchdog_) break;
    std::deque<std::shared_ptr<NcclWork>> pending = watched_;
    lock.unlock();
    std::vector<NcclWork*> finished;
    for (const auto& w : pending) {
      if (w->done()) {
        finished.push_back(w.get());
        // The watchdog is what sees device completion: it feeds the heartbeat (health.h)
        // and the flight recorder, in issue order.
        reports()->recorder().ended(w->seq(), true);
        reports()->health().completed(w->seq());
        continue;
      }
      w->check_async_error();
      if (Clock::now() > w->deadline()) {
        shared_->abort(reports()->timeout(w->collective(), timeout()), true);
      }
      break;  // ops on one stream finish in order: the first pending one decides
    }
    lock.lock();
    std::erase_if(watched_, [&](const std::shared_ptr<NcclWork>& w) {
      return std::find(finished.begin(), finished.end(), w.get()) != finished.end();
    });
    bool aborted;
    {
      std::lock_guard<std::mutex> shared_lock(shared_->mutex);  // never held while taking watch_mutex_
      aborted = shared_->aborted;
    }
    if (aborted) watched_.clear();  // every pending work now reports the abort
  }
}

std::shared_ptr<Work> ProcessGroupNCCL::run_allreduce(const Collective& c) {
  return launch(c, "ncclAllReduce", [&c](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(c.in.data, c.out.data, static_cast<size_t>(c.out.count), nccl_type(c.dtype()),
                         nccl_op(c.reduce), comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_broadcast(const Collective& c) {
  return launch(c, "ncclBroadcast", [&c](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(c.in.data, c.out.data, static_cast<size_t>(c.out.count), nccl_type(c.dtype()), c.root,
                         comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_allgather(const Collective& c) {
  // In place, c.in is this rank's slice of c.out: NCCL's in-place convention.
  return launch(c, "ncclAllGather", [&c](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(c.in.data, c.out.data, static_cast<size_t>(c.in.count), nccl_type(c.dtype()), comm,
                         stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_reduce_scatter(const Collective& c) {
  // In place, c.out is this rank's slice of c.in: NCCL's in-place convention.
  return launch(c, "ncclReduceScatter", [&c](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(c.in.data, c.out.data, static_cast<size_t>(c.out.count), nccl_type(c.dtype()),
                             nccl_op(c.reduce), comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_barrier(const Collective& c) {
  float* scratch = barrier_scratch_;
  return launch(c, "ncclAllReduce(barrier)", [scratch](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args) {
  return std::make_shared<ProcessGroupNCCL>(args);
}

}  // namespace tandem
