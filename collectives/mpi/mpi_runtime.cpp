// MpiRuntime: once-per-process MPI init/finalize, datatypes and half-precision ops.
#include "collectives/mpi/mpi_runtime.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "collectives/reduce_kernels.h"

namespace tandem {

namespace {

// MPI user functions: inout[i] = in[i] op inout[i], in float, for 16-bit floats.
template <DType D, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_elements(D, Op, inout, in, inout, *len);
}

}  // namespace

const char* thread_level_str(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

MpiRuntime& MpiRuntime::get() {
  // MPI is per process by nature; this is the single place holding that state.
  static MpiRuntime* runtime = new MpiRuntime();  // never destroyed: finalize is atexit
  return *runtime;
}

MpiRuntime::MpiRuntime() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&thread_level_);
  } else {
    // Our communication thread shares the cores with the training thread. Open MPI's
    // default progress loop spins while a collective waits, taking that core from the
    // backward pass it is meant to overlap; yielding when idle measured 1.6x faster DDP
    // steps on 2 ranks x 2 cores (docs/benchmarks.md). A user's own setting wins.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &thread_level_);
    if (rc != MPI_SUCCESS) throw CollectiveError(mpi_failure("MPI_Init_thread", rc, __FILE__, __LINE__, -1));
    initialised_here_ = true;
    std::atexit(&MpiRuntime::finalize_at_exit);
  }
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    throw CollectiveError(std::string("MPI granted thread level ") + thread_level_str(thread_level_) +
                          ", but Tandem's mpi backend needs MPI_THREAD_SERIALIZED: its communication "
                          "thread calls MPI while the main thread initialised it. Use an MPI built "
                          "with thread support (Open MPI: --enable-mpi-thread-multiple).");
  }
  // Created before any communication thread runs; MPI frees user ops at finalize.
  MPI_Op_create(&half_reduce<DType::f16, ReduceOp::sum>, 1, &half_ops_[0][0]);
  MPI_Op_create(&half_reduce<DType::f16, ReduceOp::min>, 1, &half_ops_[0][1]);
  MPI_Op_create(&half_reduce<DType::f16, ReduceOp::max>, 1, &half_ops_[0][2]);
  MPI_Op_create(&half_reduce<DType::bf16, ReduceOp::sum>, 1, &half_ops_[1][0]);
  MPI_Op_create(&half_reduce<DType::bf16, ReduceOp::min>, 1, &half_ops_[1][1]);
  MPI_Op_create(&half_reduce<DType::bf16, ReduceOp::max>, 1, &half_ops_[1][2]);
}

void MpiRuntime::group_created() {
  if (live_groups_.fetch_add(1) > 0 && thread_level_ < MPI_THREAD_MULTIPLE) {
    live_groups_.fetch_sub(1);
    throw CollectiveError(std::string("a second live mpi process group needs MPI_THREAD_MULTIPLE (each group's "
                                      "communication thread calls MPI), but MPI runs at ") +
                          thread_level_str(thread_level_) + "; destroy the first group, or initialise MPI with "
                          "MPI_Init_thread(MPI_THREAD_MULTIPLE) before Tandem does");
  }
}

void MpiRuntime::group_destroyed() { live_groups_.fetch_sub(1); }

void MpiRuntime::abandon(const std::string& why) {
  if (!abandoned_.exchange(true)) spdlog::error("mpi: {}; MPI_Finalize will be skipped at exit", why);
}

void MpiRuntime::finalize_at_exit() {
  // A thread is inside an MPI collective that will never end: finalize would hang.
  if (get().abandoned_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const ReduceOp eop = engine_op(op);
  const int which = eop == ReduceOp::sum ? 0 : eop == ReduceOp::min ? 1 : 2;
  if (dtype == DType::f16 || dtype == DType::bf16) {
    return MpiRuntime::get().half_op(dtype == DType::f16 ? 0 : 1, which);
  }
  return which == 0 ? MPI_SUM : which == 1 ? MPI_MIN : MPI_MAX;
}

std::string mpi_failure(const char* statement, int code, const char* file, int line, int rank) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof(text), "MPI error %d", code);
  return std::string(statement) + " failed: " + text + " at " + file + ":" + std::to_string(line) +
         " (rank " + std::to_string(rank) + ", cpu)";
}

}  // namespace tandem
