// Process-wide MPI state: MPI can be initialised and finalised once per process, so
// this is the one place that does it, with the thread level checked.
//
// Thread level: only the communication thread calls collectives, while init and
// finalize run on the thread that created the group. MPI_THREAD_FUNNELED would allow
// only that thread, so MPI_THREAD_SERIALIZED (any thread, never two at once) is the
// level we need and request; less is an error. Two live groups would mean two comm
// threads calling MPI at once, which needs MPI_THREAD_MULTIPLE: without it (e.g. the
// application initialised MPI at that level itself) a second live group is refused.
// Finalize runs at exit, unless a communication thread is stuck inside MPI after a
// timeout: finalizing then would hang, so it is skipped and mpirun reports the exit.
#pragma once

#include <mpi.h>

#include <atomic>
#include <string>

#include "collectives/types.h"

namespace tandem {

class MpiRuntime {
 public:
  // Initialises MPI on first use (or adopts an MPI someone else initialised).
  // Throws CollectiveError if the thread level granted is below SERIALIZED.
  static MpiRuntime& get();

  int thread_level() const { return thread_level_; }
  // Counts live groups; throws when a second one would break the thread level.
  void group_created();
  void group_destroyed();
  // Called when a communication thread had to be abandoned inside MPI.
  void abandon(const std::string& why);
  // Tandem's user op for [f16, bf16][sum, min, max] (see mpi_op).
  MPI_Op half_op(int half_type, int which) const { return half_ops_[half_type][which]; }

 private:
  MpiRuntime();
  static void finalize_at_exit();

  int thread_level_ = 0;
  bool initialised_here_ = false;
  std::atomic<bool> abandoned_{false};
  std::atomic<int> live_groups_{0};
  MPI_Op half_ops_[2][3] = {};
};

// The MPI datatype carrying `dtype` (f16 and bf16 travel as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DType dtype);
// The MPI op computing `op` on `dtype`: predefined ops, or Tandem's user ops for f16
// and bf16 (MPI has no half types); avg maps to sum (divide afterwards).
MPI_Op mpi_op(ReduceOp op, DType dtype);
const char* thread_level_str(int level);

// "MPI_Allreduce(...) failed: <MPI's message> at FILE:LINE (rank R, cpu)"
std::string mpi_failure(const char* statement, int code, const char* file, int line, int rank);

}  // namespace tandem

// Every MPI call goes through this: the error names the statement, file, line, rank
// and device. MPI errors return codes because groups set MPI_ERRORS_RETURN.
#define TANDEM_MPI_CHECK(rank, statement)                                                 \
  do {                                                                                    \
    const int tandem_mpi_rc_ = (statement);                                               \
    if (tandem_mpi_rc_ != MPI_SUCCESS) {                                                  \
      throw ::tandem::CollectiveError(                                                    \
          ::tandem::mpi_failure(#statement, tandem_mpi_rc_, __FILE__, __LINE__, (rank))); \
    }                                                                                     \
  } while (0)
