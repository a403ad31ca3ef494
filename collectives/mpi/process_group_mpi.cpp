// ProcessGroupMPI and make_mpi_group, which initialises MPI and, when no store
// address was given (plain mpirun), starts a store on rank 0 whose address it shares
// with MPI_Bcast, so timeouts can still name the ranks that did not arrive.
#include "collectives/mpi/process_group_mpi.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "collectives/mpi/mpi_runtime.h"
#include "collectives/reduce_kernels.h"

namespace tandem {

const bool kMpiBuilt = true;

namespace {

// Runs on the creating thread before the group's comm thread makes any MPI call.
void bootstrap_store(BackendArgs& args) {
  constexpr int kAddrBytes = 512;
  char address[kAddrBytes] = {};
  if (args.rank == 0) {
    try {
      args.server = std::make_shared<StoreServer>(StoreServerOptions{"0.0.0.0", 0, args.job_id});
      // All ranks on this node (the usual mpirun test): loopback; else this host's name.
      const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      std::string host = "127.0.0.1";
      if (!local_size || std::atoi(local_size) != args.size) {
        char name[256] = {};
        gethostname(name, sizeof(name) - 1);
        host = name;
      }
      snprintf(address, sizeof(address), "%s:%d", host.c_str(), args.server->port());
    } catch (const std::exception& e) {
      spdlog::warn("mpi: rank 0 could not start a store ({}); timeouts will not name missing ranks", e.what());
    }
  }
  TANDEM_MPI_CHECK(args.rank, MPI_Bcast(address, kAddrBytes, MPI_CHAR, 0, MPI_COMM_WORLD));
  const std::string addr(address);
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return;
  try {
    TcpStoreOptions so;
    so.host = addr.substr(0, colon);
    so.port = std::atoi(addr.c_str() + colon + 1);
    so.job_id = args.job_id;
    so.connect_timeout = std::min<std::chrono::milliseconds>(args.timeout, std::chrono::seconds(30));
    args.store = std::make_shared<PrefixStore>("tandem/mpi/" + args.group_name + "/", std::make_shared<TcpStore>(so));
  } catch (const std::exception& e) {
    spdlog::warn("mpi: rank {} cannot reach the store at {} ({}); timeouts will not name missing ranks",
                 args.rank, addr, e.what());
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args_in) {
  MpiRuntime::get();
  BackendArgs args = args_in;
  int world_rank = 0, world_size = 0;
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  if (world_rank != args.rank || world_size != args.size) {
    throw CollectiveError("mpi: MPI_COMM_WORLD has rank " + std::to_string(world_rank) + " of " +
                          std::to_string(world_size) + ", but the environment says rank " +
                          std::to_string(args.rank) + " of " + std::to_string(args.size));
  }
  MpiRuntime::get().group_created();
  try {
    if (!args.store) bootstrap_store(args);
    return std::make_shared<ProcessGroupMPI>(args);
  } catch (...) {
    MpiRuntime::get().group_destroyed();
    throw;
  }
}

ProcessGroupMPI::ProcessGroupMPI(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"mpi", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}) {
  // A duplicate keeps this group's messages apart from any other user of MPI.
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  if (args.check_ops) {
    // On a communicator of their own, posted in op order on every rank (MPI matches
    // collectives by order per communicator), and nonblocking: an op's exchange starts
    // while the op before it moves data, so streamed ops do not meet once more per op.
    TANDEM_MPI_CHECK(args.rank, MPI_Comm_dup(MPI_COMM_WORLD, &check_comm_));
    TANDEM_MPI_CHECK(args.rank, MPI_Comm_set_errhandler(check_comm_, MPI_ERRORS_RETURN));
    check_ops_early_with([comm = check_comm_, rank = args.rank](const OpFingerprint* mine, OpFingerprint* all,
                                                                 uint64_t) -> std::function<void()> {
      auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
      TANDEM_MPI_CHECK(rank, MPI_Iallgather(mine, sizeof(OpFingerprint), MPI_BYTE, all, sizeof(OpFingerprint),
                                            MPI_BYTE, comm, request.get()));
      return [request, rank] { TANDEM_MPI_CHECK(rank, MPI_Wait(request.get(), MPI_STATUS_IGNORE)); };
    });
  }
}

ProcessGroupMPI::~ProcessGroupMPI() {
  if (stop_comm_thread()) {
    // Still counted as live: its thread may call MPI whenever the peer shows up.
    MpiRuntime::get().abandon("rank " + std::to_string(rank()) +
                              "'s communication thread is stuck in an MPI collective after a timeout");
    return;  // the communicator is still in use by that thread
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Comm_free(&comm_);
    if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
  }
  MpiRuntime::get().group_destroyed();
}

int ProcessGroupMPI::count_of(const Collective& c, const Buffer& b) const {
  if (b.count > INT_MAX) {
    throw std::invalid_argument("mpi " + std::string(op_str(c.op)) + ": " + std::to_string(b.count) +
                                " elements exceed MPI's int count; split the buffer");
  }
  return static_cast<int>(b.count);
}

std::shared_ptr<Work> ProcessGroupMPI::run_allreduce(const Collective& c) {
  const int n = count_of(c, c.out);
  return submit(c, [comm = comm_, c, n, rank = rank(), size = size()] {
    const void* send = c.in_place ? MPI_IN_PLACE : c.in.data;
    TANDEM_MPI_CHECK(rank, MPI_Allreduce(send, c.out.data, n, mpi_datatype(c.dtype()),
                                         mpi_op(c.reduce, c.dtype()), comm));
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, n, size);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_broadcast(const Collective& c) {
  const int n = count_of(c, c.out);
  return submit(c, [comm = comm_, c, n, rank = rank()] {
    if (rank == c.root && !c.in_place) std::memcpy(c.out.data, c.in.data, c.out.bytes());
    TANDEM_MPI_CHECK(rank, MPI_Bcast(c.out.data, n, mpi_datatype(c.dtype()), c.root, comm));
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_allgather(const Collective& c) {
  const int n = count_of(c, c.in);
  count_of(c, c.out);
  return submit(c, [comm = comm_, c, n, rank = rank()] {
    const MPI_Datatype type = mpi_datatype(c.dtype());
    // MPI's in-place allgather takes this rank's input from its slice of the output,
    // which is exactly our in-place convention.
    const void* send = c.in_place ? MPI_IN_PLACE : c.in.data;
    TANDEM_MPI_CHECK(rank, MPI_Allgather(send, n, type, c.out.data, n, type, comm));
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_reduce_scatter(const Collective& c) {
  const int n = count_of(c, c.out);
  count_of(c, c.in);
  return submit(c, [comm = comm_, c, n, rank = rank(), size = size()] {
    const MPI_Datatype type = mpi_datatype(c.dtype());
    const MPI_Op op = mpi_op(c.reduce, c.dtype());
    if (c.in_place) {
      // MPI puts an in-place result at the front of the buffer; ours goes to slice `rank`.
      TANDEM_MPI_CHECK(rank, MPI_Reduce_scatter_block(MPI_IN_PLACE, c.in.data, n, type, op, comm));
      if (c.out.data != c.in.data) std::memmove(c.out.data, c.in.data, c.out.bytes());
    } else {
      TANDEM_MPI_CHECK(rank, MPI_Reduce_scatter_block(c.in.data, c.out.data, n, type, op, comm));
    }
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, n, size);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_barrier(const Collective& c) {
  return submit(c, [comm = comm_, rank = rank()] { TANDEM_MPI_CHECK(rank, MPI_Barrier(comm)); });
}

}  // namespace tandem
