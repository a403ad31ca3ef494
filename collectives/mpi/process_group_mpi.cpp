// ProcessGroupMPI and make_mpi_group, which initialises MPI and, when no store
// address was given (plain mpirun), starts a store on rank 0 whose address it shares
// with MPI_Bcast, so timeouts can still name the ranks that did not arrive.
#include "collectives/mpi/process_group_mpi.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "collectives/mpi/mpi_runtime.h"
#include "collectives/mpi/op_packets.h"
#include "collectives/reduce_kernels.h"
#include "collectives/store_auth.h"

namespace tandem {

const bool kMpiBuilt = true;

namespace {

// The tag of our point-to-point messages on the group's communicator (Open MPI's
// collectives use negative tags of their own, so they never match these).
constexpr int kTag = 0x7a;

// Reduce-scatter in rounds (see process_group_mpi.h): each round sends this rank's
// piece of every other slice to its owner, receives every rank's piece of slice `rank`
// into `received` (size x round elements, ours copied), and reduces them in rank order
// into out. Returns the bytes staged.
size_t reduce_scatter_rounds(MPI_Comm comm, int rank, int size, const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op, size_t round_bytes) {
  if (count == 0) return 0;
  const size_t elem = dtype_size(dtype);
  const size_t slice_bytes = static_cast<size_t>(count) * elem;
  // At most INT_MAX bytes per message, as MPI counts are ints.
  const int64_t round = round_elements(round_bytes, elem, count, INT_MAX);
  std::vector<uint8_t> received(static_cast<size_t>(round) * elem * static_cast<size_t>(size));
  std::vector<MPI_Request> requests(2 * static_cast<size_t>(size - 1), MPI_REQUEST_NULL);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t first = 0; first < count; first += round) {
    const int64_t n = std::min(round, count - first);
    const size_t piece = static_cast<size_t>(n) * elem;
    const size_t at = static_cast<size_t>(first) * elem;
    size_t k = 0;
    for (int i = 1; i < size; ++i) {
      const int from = (rank + size - i) % size;
      TANDEM_MPI_CHECK(rank, MPI_Irecv(received.data() + static_cast<size_t>(from) * piece, static_cast<int>(piece),
                                       MPI_BYTE, from, kTag, comm, &requests[k++]));
    }
    for (int i = 1; i < size; ++i) {
      const int to = (rank + i) % size;
      TANDEM_MPI_CHECK(rank, MPI_Isend(src + static_cast<size_t>(to) * slice_bytes + at, static_cast<int>(piece),
                                       MPI_BYTE, to, kTag, comm, &requests[k++]));
    }
    std::memcpy(received.data() + static_cast<size_t>(rank) * piece, src + static_cast<size_t>(rank) * slice_bytes + at,
                piece);
    // Every send done before out is written: in place, out is our slice of `in`, which
    // is never sent, and later rounds read only `in` past this round.
    TANDEM_MPI_CHECK(rank, MPI_Waitall(static_cast<int>(k), requests.data(), MPI_STATUSES_IGNORE));
    // In rank order: the result depends neither on the rounds nor on arrival order.
    reduce_pieces_in_rank_order(dtype, engine_op(op), dst + at, received.data(), size, n);
  }
  return received.size();
}

// Ring all-gather in `out` itself (size x each bytes): in step s, rank r sends slice
// (r - s) to r + 1 and receives slice (r - s - 1) from r - 1. Step 0 sends `mine` (this
// rank's input, or its slice of `out` in place) where it lies; out of place it is copied
// into its slice last, once the peers have what they need. Nothing staged; a step's
// messages are at most INT_MAX bytes each.
void allgather_ring(MPI_Comm comm, int rank, int size, const void* mine, void* out, size_t each) {
  auto* base = static_cast<uint8_t*>(out);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int s = 0; s < size - 1; ++s) {
    const size_t send_slice = static_cast<size_t>((rank - s + size) % size);
    const size_t recv_slice = static_cast<size_t>((rank - s - 1 + 2 * size) % size);
    const auto* send = s == 0 ? static_cast<const uint8_t*>(mine) : base + send_slice * each;
    for (size_t at = 0; at < each; at += INT_MAX) {
      const int n = static_cast<int>(std::min<size_t>(INT_MAX, each - at));
      TANDEM_MPI_CHECK(rank, MPI_Sendrecv(send + at, n, MPI_BYTE, right, kTag, base + recv_slice * each + at, n,
                                          MPI_BYTE, left, kTag, comm, MPI_STATUS_IGNORE));
    }
  }
  uint8_t* own = base + static_cast<size_t>(rank) * each;
  if (mine != own) std::memcpy(own, mine, each);
}

// With the op check on, every op starts with its packet exchange (op_packets.h); true
// when that was the whole op. Off, the op goes to MPI as it is.
bool checked_inline(OpPackets* packets, const Collective& c) {
  if (!packets) return false;
  packets->exchange(c);
  if (!OpPackets::fits(c)) return false;
  packets->finish_inline(c);
  return true;
}

// Runs on the creating thread before the group's comm thread makes any MPI call.
void bootstrap_store(BackendArgs& args) {
  // The store's address and a job secret rank 0 makes for this store alone, sent over
  // MPI, which already connects exactly the job's processes (docs/security.md).
  constexpr int kAddrBytes = 512;
  struct {
    char address[kAddrBytes];
    char secret[80];
  } bootstrap = {};
  char* address = bootstrap.address;
  if (args.rank == 0) {
    try {
      const std::string secret = store_auth::generate_secret();
      args.server = std::make_shared<StoreServer>(StoreServerOptions{"0.0.0.0", 0, args.job_id, secret});
      snprintf(bootstrap.secret, sizeof(bootstrap.secret), "%s", secret.c_str());
      // All ranks on this node (the usual mpirun test): loopback; else this node's name,
      // Slurm's for it under srun (the name its node list resolves), or the host name.
      const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const char* slurm_node = std::getenv("SLURMD_NODENAME");
      std::string host = "127.0.0.1";
      if (!local_size || std::atoi(local_size) != args.size) {
        char name[256] = {};
        gethostname(name, sizeof(name) - 1);
        host = slurm_node && *slurm_node ? slurm_node : name;
      }
      snprintf(address, kAddrBytes, "%s:%d", host.c_str(), args.server->port());
    } catch (const std::exception& e) {
      spdlog::warn("mpi: rank 0 could not start a store ({}); timeouts will not name missing ranks", e.what());
    }
  }
  TANDEM_MPI_CHECK(args.rank, MPI_Bcast(&bootstrap, sizeof(bootstrap), MPI_BYTE, 0, MPI_COMM_WORLD));
  const std::string addr(address);
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return;
  try {
    TcpStoreOptions so;
    so.host = addr.substr(0, colon);
    so.port = std::atoi(addr.c_str() + colon + 1);
    so.job_id = args.job_id;
    so.secret = std::string(bootstrap.secret, strnlen(bootstrap.secret, sizeof(bootstrap.secret)));
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
    : ThreadedProcessGroup(Setup{"mpi", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}),
      round_bytes_(round_bytes_from_env()),
      peak_temporary_(std::make_shared<PeakBytes>()) {
  // A duplicate keeps this group's messages apart from any other user of MPI.
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  TANDEM_MPI_CHECK(args.rank, MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  if (args.check_ops) {
    // On the group's own communicator, in its turn: every op's check is one small
    // MPI_Allgather that carries a small op's data too (op_packets.h). A zero-byte op
    // moves nothing but still compares fingerprints.
    packets_ = std::make_shared<OpPackets>(comm_, args.rank, args.size);
    check_ops_in_engine([packets = packets_](const Collective& c) { packets->exchange(c); });
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
  return submit(c, [comm = comm_, c, n, rank = rank(), size = size(), packets = packets_] {
    if (checked_inline(packets.get(), c)) return;
    const void* send = c.in_place ? MPI_IN_PLACE : c.in.data;
    TANDEM_MPI_CHECK(rank, MPI_Allreduce(send, c.out.data, n, mpi_datatype(c.dtype()),
                                         mpi_op(c.reduce, c.dtype()), comm));
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, n, size);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_broadcast(const Collective& c) {
  const int n = count_of(c, c.out);
  return submit(c, [comm = comm_, c, n, rank = rank(), packets = packets_] {
    if (checked_inline(packets.get(), c)) return;
    if (rank == c.root && !c.in_place) std::memcpy(c.out.data, c.in.data, c.out.bytes());
    TANDEM_MPI_CHECK(rank, MPI_Bcast(c.out.data, n, mpi_datatype(c.dtype()), c.root, comm));
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_allgather(const Collective& c) {
  count_of(c, c.in);
  count_of(c, c.out);
  return submit(c, [comm = comm_, c, rank = rank(), size = size(), packets = packets_] {
    if (checked_inline(packets.get(), c)) return;
    // In place, c.in is this rank's slice of the output.
    allgather_ring(comm, rank, size, c.in.data, c.out.data, c.in.bytes());
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_reduce_scatter(const Collective& c) {
  count_of(c, c.out);
  count_of(c, c.in);
  return submit(c, [comm = comm_, c, rank = rank(), size = size(), round = round_bytes_, peak = peak_temporary_,
                    packets = packets_] {
    if (checked_inline(packets.get(), c)) return;
    // In place, out is slice `rank` of in, as reduce_scatter_rounds allows.
    peak->note(reduce_scatter_rounds(comm, rank, size, c.in.data, c.out.data, c.out.count, c.dtype(), c.reduce, round));
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, c.out.count, size);
  });
}

size_t ProcessGroupMPI::peak_temporary_bytes() const { return peak_temporary_->get(); }

std::shared_ptr<Work> ProcessGroupMPI::run_barrier(const Collective& c) {
  return submit(c, [comm = comm_, c, rank = rank(), packets = packets_] {
    if (checked_inline(packets.get(), c)) return;
    TANDEM_MPI_CHECK(rank, MPI_Barrier(comm));
  });
}

}  // namespace tandem
