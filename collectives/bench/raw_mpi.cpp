// The raw MPI path: MPI_Allreduce & co. called directly on MPI_COMM_WORLD from the
// benchmark's thread, with no Tandem layers (queue, comm thread, Work). Legal under
// MPI_THREAD_SERIALIZED because the harness drains the group before each raw call.
#include <cstring>

#include "collectives/bench/bench_harness.h"
#include "collectives/mpi/mpi_runtime.h"
#include "collectives/reduce_kernels.h"

namespace tandem::bench {

namespace {

class RawMpi : public Path {
 public:
  explicit RawMpi(int rank) : rank_(rank) {}
  std::string name() const override { return "raw MPI (MPI_* called directly, no Tandem layers)"; }

  std::shared_ptr<Work> issue(const Collective& c) override {
    const MPI_Datatype type = mpi_datatype(c.dtype());
    const MPI_Op op = mpi_op(c.reduce, c.dtype());
    const int n = static_cast<int>(c.out.count);
    switch (c.op) {
      case OpType::allreduce:
        TANDEM_MPI_CHECK(rank_, MPI_Allreduce(c.in_place ? MPI_IN_PLACE : c.in.data, c.out.data, n, type, op,
                                              MPI_COMM_WORLD));
        break;
      case OpType::broadcast:
        if (rank_ == c.root && !c.in_place) std::memcpy(c.out.data, c.in.data, c.out.bytes());
        TANDEM_MPI_CHECK(rank_, MPI_Bcast(c.out.data, n, type, c.root, MPI_COMM_WORLD));
        break;
      case OpType::allgather: {
        const int per_rank = static_cast<int>(c.in.count);
        TANDEM_MPI_CHECK(rank_, MPI_Allgather(c.in_place ? MPI_IN_PLACE : c.in.data, per_rank, type, c.out.data,
                                              per_rank, type, MPI_COMM_WORLD));
        break;
      }
      case OpType::reduce_scatter:
        if (c.in_place) {
          TANDEM_MPI_CHECK(rank_, MPI_Reduce_scatter_block(MPI_IN_PLACE, c.in.data, n, type, op, MPI_COMM_WORLD));
          if (c.out.data != c.in.data) std::memmove(c.out.data, c.in.data, c.out.bytes());
        } else {
          TANDEM_MPI_CHECK(rank_, MPI_Reduce_scatter_block(c.in.data, c.out.data, n, type, op, MPI_COMM_WORLD));
        }
        break;
      case OpType::barrier:
        TANDEM_MPI_CHECK(rank_, MPI_Barrier(MPI_COMM_WORLD));
        break;
    }
    return nullptr;
  }
  void drain(std::shared_ptr<Work>) override {}

 private:
  int rank_;
};

}  // namespace

std::unique_ptr<Path> make_raw_mpi_path(ProcessGroup& group) {
  if (group.backend_name() != "mpi") return nullptr;
  return std::make_unique<RawMpi>(group.rank());
}

}  // namespace tandem::bench
