// The MPI backend: blocking MPI collectives (MPI_Allreduce, MPI_Bcast, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Barrier) issued by the communication thread on the
// group's own duplicate of MPI_COMM_WORLD, so they progress while the caller computes.
// MPI collectives have no timeout: a wait that times out reports the missing ranks
// and breaks the group, and the stuck thread is abandoned at teardown (see
// mpi_runtime.h on why finalize is then skipped).
#pragma once

#include <mpi.h>

#include "collectives/backends.h"
#include "collectives/threaded_process_group.h"

namespace tandem {

class ProcessGroupMPI : public ThreadedProcessGroup {
 public:
  // MPI must already be initialised (make_mpi_group does it) and the world must match args.
  explicit ProcessGroupMPI(const BackendArgs& args);
  ~ProcessGroupMPI() override;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  int count_of(const Collective& c, const Buffer& b) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // the op check's exchanges (see the constructor)
};

}  // namespace tandem
