// ProcessGroup: collectives over typed buffers, one implementation per engine
// (mpi, gloo, nccl, shm), each in its own folder. Every call returns a Work at once.
//
// Calling rules (as in c10d): every rank issues the same collectives in the same
// order, from one thread at a time; each op gets the next sequence number (1, 2, ...),
// which is therefore the same op on every rank. Single-buffer overloads run in place:
//   allreduce(buf)        buf holds the input and receives the result
//   broadcast(buf, root)  root's buf is sent, every other rank's buf receives it
//   allgather(buf)        buf.count == size * n; this rank's input is slice `rank`
//   reduce_scatter(buf)   buf.count == size * n; the result lands in slice `rank`
//                         (the other slices are unspecified afterwards)
// Two-buffer overloads run out of place with the counts of collectives/types.h.
//
// A backend that lacks an op throws UnsupportedOp naming the backend and op, and no
// sequence number is consumed. Bad arguments throw std::invalid_argument.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tandem/collectives/fault_injection.h"
#include "tandem/collectives/flight_recorder.h"
#include "tandem/collectives/health.h"
#include "tandem/collectives/store.h"
#include "tandem/collectives/types.h"
#include "tandem/collectives/work.h"

namespace tandem {

// The timeout and failure messages of one group: op, seq, bytes, this rank, and every
// rank's state from its heartbeat (collectives/health.h), plus the group's flight
// recorder (collectives/flight_recorder.h), dumped on the first timeout or failure.
// Work handles and queued engine tasks hold this, never the group itself: a group whose
// last owner let go while one of its own threads (a comm thread, the nccl watchdog) held
// it would be destroyed on that thread and have to join it from itself.
class FailureReports {
 public:
  FailureReports(std::string backend, int rank, int size, int node, std::chrono::milliseconds timeout,
                 std::shared_ptr<Store> store);

  std::string timeout(const Collective& c, std::chrono::milliseconds waited);
  // An op the engine failed: its error plus every rank's state.
  std::string failure(const Collective& c, const std::string& engine_error);
  RankHealth& health() { return health_; }
  FlightRecorder& recorder() { return recorder_; }
  // Dumps the flight recorder once per group for errors (later calls do nothing);
  // requested dumps (SIGUSR2, or SIGUSR1) always write.
  void dump_once(const std::string& reason);

 private:
  void on_heartbeat(Store* store);

  const std::string backend_;
  const int rank_;
  const int size_;
  FlightRecorder recorder_;  // before health_: its heartbeat thread uses the recorder
  std::atomic<bool> dumped_{false};
  RankHealth health_;
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend_name() const { return backend_; }
  // Default for Work::wait() and every engine-side timeout.
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Sequence number of the last op issued (0 before the first).
  uint64_t last_seq() const;
  // The store this group rendezvoused through (null when it has none).
  const std::shared_ptr<Store>& store() const { return store_; }
  // This rank's heartbeat (the training loop reports steps through it) and flight
  // recorder (dump it on a fatal error outside the collectives).
  RankHealth& health() { return reports_->health(); }
  void dump_flight_recorder(const std::string& reason) { reports_->dump_once(reason); }

  std::shared_ptr<Work> allreduce(Buffer inout, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> allreduce(Buffer in, Buffer out, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> broadcast(Buffer inout, int root);
  std::shared_ptr<Work> broadcast(Buffer in, Buffer out, int root);
  std::shared_ptr<Work> allgather(Buffer inout);
  std::shared_ptr<Work> allgather(Buffer in, Buffer out);
  std::shared_ptr<Work> reduce_scatter(Buffer inout, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> reduce_scatter(Buffer in, Buffer out, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> barrier();

  // Whether buffers on `device` can be passed to this group's ops (CPU backends: host
  // memory only; nccl: its own GPU only). Callers stage through the other side if not.
  bool takes(Device device) const { return accepts(device); }
  // The stream device backends order their ops after (inputs) and make Work::wait()
  // hold (outputs): the training thread's compute stream, as a cudaStream_t. CPU
  // backends ignore it.
  virtual void use_compute_stream(void* stream) {}
  // The most bytes this group's own code held at once in temporaries for one op (the
  // staging of reduce-scatter and all-gather rounds) since it was created; 0 where a
  // backend stages nothing. Engine-internal buffers (Open MPI's, Gloo's) are not
  // counted: each backend's header says what its engine allocates.
  virtual size_t peak_temporary_bytes() const { return 0; }
  // CPU time this group's communication thread(s) have used so far: the copies, sums and
  // engine calls of its ops, and their polling. nullopt where the backend has none (nccl
  // works on the device) or it was shut down. DDP's accounting (summary.json comm_cpu_ms).
  virtual std::optional<std::chrono::nanoseconds> comm_thread_cpu_time() const { return std::nullopt; }
  // Host memory whose in-place all-reduces this backend runs where the data lies: its
  // peers read it directly, so nothing is copied in (DDP's gradient buckets; the shm
  // backend maps every rank's buffer into every other rank). A collective call: every
  // rank must ask for the same sizes in the same order, as the reducer's buckets do.
  // `data` is null where the backend offers none (the default), or could not set it up
  // on some rank (all ranks then get null, and one of them logs why). The memory lives
  // as long as `owner`. Ops on other buffers, and on these buffers where the ranks do
  // not all pass theirs, run as usual.
  struct SharedBuffer {
    void* data = nullptr;
    std::shared_ptr<void> owner;
  };
  virtual SharedBuffer allocate_shared_buffer(size_t bytes) { return {}; }

 protected:
  struct Setup {
    std::string backend;  // "mpi", "gloo", "nccl", "shm", "hier"
    int rank = 0;
    int size = 1;
    std::chrono::milliseconds timeout{std::chrono::minutes(10)};
    std::shared_ptr<Store> store;          // group-prefixed; may be null
    std::shared_ptr<StoreServer> server;   // kept alive when this rank hosts the store
    int node = -1;                         // NODE_RANK, for health reports
  };
  explicit ProcessGroup(Setup setup);

  // The backend's ops. Each receives a validated, normalised Collective (types.h)
  // carrying its sequence number, and returns its Work without waiting. Defaults
  // throw UnsupportedOp.
  virtual std::shared_ptr<Work> run_allreduce(const Collective& c);
  virtual std::shared_ptr<Work> run_broadcast(const Collective& c);
  virtual std::shared_ptr<Work> run_allgather(const Collective& c);
  virtual std::shared_ptr<Work> run_reduce_scatter(const Collective& c);
  virtual std::shared_ptr<Work> run_barrier(const Collective& c);
  // Whether buffers on `device` can be passed to this backend.
  virtual bool accepts(Device device) const = 0;

  UnsupportedOp unsupported(const Collective& c, const std::string& detail = "") const;
  // Shared with Work handles and engine tasks (see FailureReports).
  const std::shared_ptr<FailureReports>& reports() const { return reports_; }

 private:
  std::shared_ptr<Work> issue(Collective c);
  void inject_fault(const Collective& c);
  void check_buffer(const Collective& c, const Buffer& b, const char* which) const;

  std::string backend_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<StoreServer> server_;
  std::shared_ptr<FailureReports> reports_;
  std::optional<FaultPlan> fault_;  // TANDEM_FAULT for this rank (fault_injection.h)
  std::shared_ptr<Work> fault_last_work_;  // with a fault plan only: the op before the fault's
  mutable std::mutex issue_mutex_;
  uint64_t last_seq_ = 0;
};

// Dumps the group's flight recorder when the scope it guards is left by an exception
// (a fatal error outside the collectives, e.g. in the training loop). Null: does nothing.
class DumpOnFatalError {
 public:
  explicit DumpOnFatalError(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), exceptions_(std::uncaught_exceptions()) {}
  ~DumpOnFatalError() {
    if (group_ && std::uncaught_exceptions() > exceptions_) group_->dump_flight_recorder("fatal error");
  }
  DumpOnFatalError(const DumpOnFatalError&) = delete;
  DumpOnFatalError& operator=(const DumpOnFatalError&) = delete;

 private:
  std::shared_ptr<ProcessGroup> group_;
  int exceptions_;
};

}  // namespace tandem
