// ProcessGroup: argument checks, normalisation to a Collective, sequence numbers,
// progress publishing and the timeout/failure reports shared by every backend.
#include "collectives/process_group.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace tandem {

ProcessGroup::ProcessGroup(Setup setup)
    : backend_(std::move(setup.backend)),
      rank_(setup.rank),
      size_(setup.size),
      timeout_(setup.timeout),
      store_(std::move(setup.store)),
      server_(std::move(setup.server)),
      reports_(std::make_shared<FailureReports>(backend_, rank_, size_, setup.node, timeout_, store_)),
      fault_(FaultPlan::from_env(rank_)) {
  if (fault_ && fault_->kind == FaultPlan::Kind::hang_at_step) fault_.reset();  // the trainer's
}

ProcessGroup::~ProcessGroup() = default;

uint64_t ProcessGroup::last_seq() const {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  return last_seq_;
}

UnsupportedOp ProcessGroup::unsupported(const Collective& c, const std::string& detail) const {
  return UnsupportedOp("the " + backend_ + " backend does not support " + op_str(c.op) +
                       (detail.empty() ? "" : " " + detail));
}

std::shared_ptr<Work> ProcessGroup::run_allreduce(const Collective& c) { throw unsupported(c); }
std::shared_ptr<Work> ProcessGroup::run_broadcast(const Collective& c) { throw unsupported(c); }
std::shared_ptr<Work> ProcessGroup::run_allgather(const Collective& c) { throw unsupported(c); }
std::shared_ptr<Work> ProcessGroup::run_reduce_scatter(const Collective& c) { throw unsupported(c); }
std::shared_ptr<Work> ProcessGroup::run_barrier(const Collective& c) { throw unsupported(c); }

FailureReports::FailureReports(std::string backend, int rank, int size, int node, std::chrono::milliseconds timeout,
                               std::shared_ptr<Store> store)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      recorder_(FlightIdentity{backend_, rank, size, node}),
      health_(std::move(store), rank, size, health_options_for(timeout, node),
              [this](Store* s) { on_heartbeat(s); }) {}

void FailureReports::on_heartbeat(Store* store) {
  if (!recorder_.dump_requested()) return;
  recorder_.dump("signal");
  // Also into the store, where tandemrun's hang analysis reads every rank's dump.
  if (store) {
    try {
      store->set("flight/" + std::to_string(rank_), recorder_.to_json("signal"));
    } catch (const std::exception&) {
      // The store is unreachable: the file or stderr copy is what remains.
    }
  }
}

void FailureReports::dump_once(const std::string& reason) {
  if (!dumped_.exchange(true)) recorder_.dump(reason);
}

std::string FailureReports::timeout(const Collective& c, std::chrono::milliseconds waited) {
  std::string report = c.describe() + " did not complete within " + std::to_string(waited.count()) +
                       " ms on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" +
                       backend_ + "): " + health_.explain(c.seq, backend_);
  dump_once("collective timeout: " + c.describe());
  return report;
}

std::string FailureReports::failure(const Collective& c, const std::string& engine_error) {
  std::string report = c.describe() + " failed on rank " + std::to_string(rank_) + " of " +
                       std::to_string(size_) + " (" + backend_ + "): " + engine_error + "; " +
                       health_.explain(c.seq, backend_);
  dump_once("collective failed: " + c.describe());
  return report;
}

void ProcessGroup::check_buffer(const Collective& c, const Buffer& b, const char* which) const {
  const std::string where = std::string(op_str(c.op)) + ": " + which;
  if (b.count < 0) throw std::invalid_argument(where + " has a negative element count");
  if (b.count > 0 && b.data == nullptr) throw std::invalid_argument(where + " is null");
  if (!accepts(b.device)) {
    throw std::invalid_argument(where + " is on " + b.device.str() + ", which the " + backend_ +
                                " backend cannot use");
  }
}

void ProcessGroup::inject_fault(const Collective& c) {
  using Kind = FaultPlan::Kind;
  const bool inside = fault_->kind != Kind::stop_before;
  // Inside: the rank has entered the op (published, as its peers will see it) but its
  // data never moves, whatever the op's size: stopping after handing it to the engine
  // would let a small op finish first. Either way the heartbeat is flushed last, so its
  // peers see exactly the ops it issued (a coalesced write could otherwise lag by a few),
  // and the earlier ops finish first. Ops are issued without waiting, so the
  // previous one may still be moving data on the comm thread, and a stop now would leave
  // this rank (and its peers) in it rather than in this one: a CI run stopped rank 1
  // inside #60 while its #59 was still reducing, so its heartbeat read "completed #58"
  // and the analysis named #59. Its failure, if any, is its owner's to report.
  if (fault_last_work_) {
    try {
      fault_last_work_->wait(std::chrono::seconds(30));
    } catch (const std::exception&) {
    }
  }
  fault_last_work_.reset();
  if (inside) reports_->health().entered(c.seq);
  reports_->health().flush(std::chrono::seconds(10));
  const bool kill = fault_->kind == Kind::kill_inside;
  spdlog::warn("fault injection ({}): rank {} (pid {}) {} {} {}", fault_->describe(), rank_, getpid(),
               kill ? "kills itself" : "stops itself", inside ? "inside" : "before", c.describe());
  std::fflush(nullptr);
  raise(kill ? SIGKILL : SIGSTOP);
}

std::shared_ptr<Work> ProcessGroup::issue(Collective c) {
  if (c.op != OpType::barrier) {
    check_buffer(c, c.in, "input");
    check_buffer(c, c.out, "output");
    if (c.in.dtype != c.out.dtype) {
      throw std::invalid_argument(std::string(op_str(c.op)) + ": input is " + dtype_name(c.in.dtype) +
                                  " but output is " + dtype_name(c.out.dtype));
    }
    if (!(c.in.device == c.out.device)) {
      throw std::invalid_argument(std::string(op_str(c.op)) + ": input and output are on different devices");
    }
  }
  if (c.op == OpType::broadcast && (c.root < 0 || c.root >= size_)) {
    throw std::invalid_argument("broadcast: root " + std::to_string(c.root) + " is not a rank of a group of " +
                                std::to_string(size_));
  }
  std::lock_guard<std::mutex> lock(issue_mutex_);
  c.seq = last_seq_ + 1;
  if (fault_ && static_cast<int64_t>(c.seq) == fault_->at) inject_fault(c);
  // Recorded before the backend sees it: a backend may start (and finish) it at once.
  reports_->recorder().enqueued(c);
  std::shared_ptr<Work> work;
  switch (c.op) {
    case OpType::allreduce: work = run_allreduce(c); break;
    case OpType::broadcast: work = run_broadcast(c); break;
    case OpType::allgather: work = run_allgather(c); break;
    case OpType::reduce_scatter: work = run_reduce_scatter(c); break;
    case OpType::barrier: work = run_barrier(c); break;
  }
  last_seq_ = c.seq;  // only once the backend accepted it: unsupported ops consume no seq
  reports_->health().entered(c.seq);
  if (fault_ && static_cast<int64_t>(c.seq) + 1 == fault_->at) fault_last_work_ = work;
  return work;
}

namespace {
void require_counts(const char* op, int64_t got, int64_t want, const char* what) {
  if (got != want) {
    throw std::invalid_argument(std::string(op) + ": " + what + " has " + std::to_string(got) +
                                " elements, expected " + std::to_string(want));
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::allreduce(Buffer inout, ReduceOp op) {
  Collective c{OpType::allreduce, 0, op, 0, true, inout, inout};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::allreduce(Buffer in, Buffer out, ReduceOp op) {
  require_counts("allreduce", out.count, in.count, "output");
  Collective c{OpType::allreduce, 0, op, 0, in.data == out.data, in, out};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::broadcast(Buffer inout, int root) {
  Collective c{OpType::broadcast, 0, ReduceOp::sum, root, true, inout, inout};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::broadcast(Buffer in, Buffer out, int root) {
  require_counts("broadcast", out.count, in.count, "output");
  Collective c{OpType::broadcast, 0, ReduceOp::sum, root, in.data == out.data, in, out};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::allgather(Buffer inout) {
  if (inout.count % size_ != 0) {
    throw std::invalid_argument("allgather: in-place buffer of " + std::to_string(inout.count) +
                                " elements is not a multiple of the group size " + std::to_string(size_));
  }
  const int64_t n = inout.count / size_;
  Collective c{OpType::allgather, 0, ReduceOp::sum, 0, true, inout.slice(rank_ * n, n), inout};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::allgather(Buffer in, Buffer out) {
  require_counts("allgather", out.count, in.count * size_, "output");
  const bool in_place = in.data == static_cast<char*>(out.data) + in.bytes() * rank_;
  Collective c{OpType::allgather, 0, ReduceOp::sum, 0, in_place && in.count > 0, in, out};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Buffer inout, ReduceOp op) {
  if (inout.count % size_ != 0) {
    throw std::invalid_argument("reduce_scatter: in-place buffer of " + std::to_string(inout.count) +
                                " elements is not a multiple of the group size " + std::to_string(size_));
  }
  const int64_t n = inout.count / size_;
  Collective c{OpType::reduce_scatter, 0, op, 0, true, inout, inout.slice(rank_ * n, n)};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Buffer in, Buffer out, ReduceOp op) {
  require_counts("reduce_scatter", in.count, out.count * size_, "input");
  const bool in_place = out.data == static_cast<char*>(in.data) + out.bytes() * rank_;
  Collective c{OpType::reduce_scatter, 0, op, 0, in_place && out.count > 0, in, out};
  return issue(c);
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  Collective c{OpType::barrier, 0, ReduceOp::sum, 0, false, Buffer{}, Buffer{}};
  return issue(c);
}

}  // namespace tandem
