// The MPI backend: blocking MPI calls issued by the communication thread on the group's
// own duplicate of MPI_COMM_WORLD, so they progress while the caller computes:
// MPI_Allreduce, MPI_Bcast and MPI_Barrier as they are; all-gather and reduce-scatter
// are ours, on point-to-point messages, because Open MPI's allocate as much as the
// whole buffer (measured by peak RSS, Open MPI 4.1.4, 64 MiB buffers:
// MPI_Reduce_scatter_block 64 MiB on rank 0 at 2 ranks, on ranks 0 and 1 at 3, 128 MiB
// on rank 0 at 4, in place or not; MPI_Allgather at 3 ranks 43 and 21 MiB on ranks 1
// and 2, nothing at 2 and 4; MPI_Alltoallv and point-to-point nothing):
//   all-gather      a ring in the caller's output: nothing staged
//   reduce-scatter  rounds of 1 MiB of each slice (collectives/rounds.h:
//                   TANDEM_COLLECTIVE_CHUNK_KB overrides it, the same on every rank): each rank sends its piece of
//                   every slice to the slice's owner (MPI_Isend/Irecv, which stage
//                   nothing in Open MPI's shared-memory and TCP transports), which
//                   reduces the pieces in rank order; size x min(slice, round) bytes
//                   staged (peak_temporary_bytes). Rank order for every element makes the
//                   result independent of the rounds; Open MPI's own order changed with
//                   the message size, so at 3 ranks or more the last bits can differ
//                   from the MPI_Reduce_scatter_block results of before (2 ranks: a + b
//                   = b + a, the same).
// With the op check on, every op starts with one MPI_Allgather of a 256-byte packet per
// rank (op_packets.h) that carries an op of up to 224 bytes whole: those make no other call.
// MPI collectives have no timeout: a wait that times out reports the missing ranks
// and breaks the group, and the stuck thread is abandoned at teardown (see
// mpi_runtime.h on why finalize is then skipped).
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/backends.h"
#include "collectives/rounds.h"
#include "collectives/threaded_process_group.h"

namespace tandem {

class OpPackets;

class ProcessGroupMPI : public ThreadedProcessGroup {
 public:
  // MPI must already be initialised (make_mpi_group does it) and the world must match args.
  explicit ProcessGroupMPI(const BackendArgs& args);
  ~ProcessGroupMPI() override;

  size_t peak_temporary_bytes() const override;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override;
  std::shared_ptr<Work> run_broadcast(const Collective& c) override;
  std::shared_ptr<Work> run_allgather(const Collective& c) override;
  std::shared_ptr<Work> run_reduce_scatter(const Collective& c) override;
  std::shared_ptr<Work> run_barrier(const Collective& c) override;

 private:
  int count_of(const Collective& c, const Buffer& b) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::shared_ptr<OpPackets> packets_;  // the op check (null: off); used on the comm thread only
  const size_t round_bytes_;  // of each slice, per reduce-scatter round
  std::shared_ptr<PeakBytes> peak_temporary_;  // written by the comm thread's tasks only
};

}  // namespace tandem
