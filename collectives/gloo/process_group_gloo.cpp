// ProcessGroupGloo: each op becomes one Gloo call on the communication thread (the
// reduce-scatter: rounds of Gloo sends and receives, see gloo_reduce_scatter).
// Tags are the op's sequence number, so a late message of one op can never be taken
// for another's; the op check's gathers use tags of their own (check_tag).
#include "collectives/gloo/process_group_gloo.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "collectives/gloo/gloo_store.h"
#include "collectives/reduce_kernels.h"
#include "collectives/rounds.h"

namespace tandem {

const bool kGlooBuilt = true;

namespace {

// Calls f.template operator()<T>() with T the storage type of `dtype` (f16 and bf16
// share uint16_t: Gloo only moves their bytes; our reduce functions know the dtype).
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f.template operator()<float>();
    case DType::f16:
    case DType::bf16: return f.template operator()<uint16_t>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::u8: return f.template operator()<uint8_t>();
  }
}

// Tags of the op check's gathers: bit 30 set, so they differ from the tags of the
// group ops around them (their seqs, below 2^30 in any real job) and from the
// benchmark's raw ops (bit 31 set).
uint32_t check_tag(uint64_t seq) { return 0x40000000u | static_cast<uint32_t>(seq & 0x3fffffffu); }

// The slot prefix of our reduce-scatter's sends (Gloo's own collectives use 0x01-0x08,
// gloo/types.h); the tag (the op's seq) keeps ops apart within it.
constexpr uint8_t kReduceScatterSlotPrefix = 0x7a;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// This host's address on the route to `master_addr` (a connected UDP socket sends
// nothing; getsockname reports the source address the kernel picked), or "" when it
// cannot be found. Unlike gethostname(), it is right when hosts share a name, as
// network namespaces on one machine do.
std::string local_address_towards(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* a = local.ss_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                                                 : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, a, text, sizeof text)) out = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

// Blocks SIGPIPE in the calling thread for its lifetime, then restores the mask.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &before_);
  }
  ~SigpipeBlocked() {
    // A SIGPIPE raised meanwhile stays pending in this thread: taken here, while still
    // blocked, it cannot kill the process once the mask is restored.
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1 && sigismember(&before_, SIGPIPE) != 1) {
      sigset_t pipe_signal;
      sigemptyset(&pipe_signal);
      sigaddset(&pipe_signal, SIGPIPE);
      const timespec now{0, 0};
      sigtimedwait(&pipe_signal, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t before_;
};

std::shared_ptr<gloo::transport::Device> make_device(const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("TANDEM_GLOO_IFNAME"); iface && *iface) {
    attr.iface = iface;
  } else if (is_loopback(master_addr)) {
    attr.hostname = "127.0.0.1";  // single-node job: peers are on this machine
  } else if (std::string local = local_address_towards(master_addr); !local.empty()) {
    attr.hostname = local;  // the address peers reach us on: the one routed towards the master
  } else {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    attr.hostname = host;
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

}  // namespace

size_t gloo_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* in, void* out,
                           int64_t count_per_rank, DType dtype, ReduceOp op, uint32_t tag,
                           std::chrono::milliseconds timeout, size_t round_bytes) {
  const int size = context->size;
  const int rank = context->rank;
  const size_t elem = dtype_size(dtype);
  const size_t slice_bytes = static_cast<size_t>(count_per_rank) * elem;
  if (count_per_rank == 0) return 0;
  const int64_t round = round_elements(round_bytes, elem, count_per_rank);
  // received: this round's piece of every rank's slice `rank`, in rank order (ours
  // copied): size x round elements, however large the slice.
  std::vector<uint8_t> received(static_cast<size_t>(round) * elem * static_cast<size_t>(size));
  // Gloo only reads `in`; in place, `out` is our slice of it, which is never sent.
  auto send = context->createUnboundBuffer(const_cast<void*>(in), slice_bytes * static_cast<size_t>(size));
  auto recv = context->createUnboundBuffer(received.data(), received.size());
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t first = 0; first < count_per_rank; first += round) {
    const int64_t n = std::min(round, count_per_rank - first);
    const size_t piece = static_cast<size_t>(n) * elem;
    const size_t at = static_cast<size_t>(first) * elem;
    for (int i = 1; i < size; ++i) {
      const int to = (rank + i) % size;
      send->send(to, slot, static_cast<size_t>(to) * slice_bytes + at, piece);
    }
    for (int i = 1; i < size; ++i) {
      const int from = (rank + size - i) % size;
      recv->recv(from, slot, static_cast<size_t>(from) * piece, piece);
    }
    std::memcpy(received.data() + static_cast<size_t>(rank) * piece, src + static_cast<size_t>(rank) * slice_bytes + at,
                piece);
    // Every send of the round is done before `out` is written (in place, `in` around it
    // is read by later rounds only), and every receive before it is reduced.
    for (int i = 1; i < size; ++i) {
      if (!recv->waitRecv(timeout) || !send->waitSend(timeout))
        throw CollectiveError("gloo: reduce-scatter round aborted on rank " + std::to_string(rank));
    }
    // In rank order, so the result depends neither on arrival order nor on the rounds.
    reduce_pieces_in_rank_order(dtype, engine_op(op), dst + at, received.data(), size, n);
  }
  return received.size();
}

ProcessGroupGloo::ProcessGroupGloo(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"gloo", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}),
      round_bytes_(round_bytes_from_env()),
      peak_temporary_(std::make_shared<PeakBytes>()) {
  if (!args.store) throw CollectiveError("the gloo backend needs a store to connect its ranks");
  // SIGPIPE blocked while the device starts its I/O thread (which inherits the mask) and
  // the pairs connect: Gloo writes with writev, and a write to a peer that is gone must
  // fail the collective with EPIPE, not kill the process (ops run on the communication
  // thread, which blocks it too).
  const SigpipeBlocked blocked;
  try {
    auto device = make_device(args.master_addr);
    auto context = std::make_shared<gloo::rendezvous::Context>(args.rank, args.size);
    context->setTimeout(args.timeout);
    GlooStore store(std::make_shared<PrefixStore>("gloo/", args.store), args.timeout);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  } catch (const std::exception& e) {
    throw CollectiveError("gloo: rank " + std::to_string(args.rank) + " could not connect to its " +
                          std::to_string(args.size - 1) + " peers: " + e.what());
  }
  if (args.check_ops) {
    check_ops_with([context = context_, timeout = timeout()](const OpFingerprint& mine, OpFingerprint* all,
                                                              uint64_t seq) {
      OpFingerprint in = mine;  // Gloo takes a mutable input pointer
      gloo::AllgatherOptions opts(context);
      opts.setInput(reinterpret_cast<uint8_t*>(&in), sizeof(OpFingerprint));
      opts.setOutput(reinterpret_cast<uint8_t*>(all), sizeof(OpFingerprint) * static_cast<size_t>(context->size));
      opts.setTag(check_tag(seq));
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  }
}

ProcessGroupGloo::~ProcessGroupGloo() { stop_comm_thread(); }

size_t ProcessGroupGloo::peak_temporary_bytes() const { return peak_temporary_->get(); }

std::shared_ptr<Work> ProcessGroupGloo::run_allreduce(const Collective& c) {
  return submit(c, [context = context_, c, timeout = timeout()] {
    with_storage_type(c.dtype(), [&]<typename T>() {
      gloo::AllreduceOptions opts(context);
      if (!c.in_place) opts.setInput(static_cast<T*>(c.in.data), static_cast<size_t>(c.in.count));
      opts.setOutput(static_cast<T*>(c.out.data), static_cast<size_t>(c.out.count));
      const DType dtype = c.dtype();
      const ReduceOp op = engine_op(c.reduce);
      opts.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
        reduce_elements(dtype, op, out, a, b, static_cast<int64_t>(n));
      });
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, c.out.count, context->size);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::run_broadcast(const Collective& c) {
  return submit(c, [context = context_, c, timeout = timeout()] {
    with_storage_type(c.dtype(), [&]<typename T>() {
      gloo::BroadcastOptions opts(context);
      opts.setRoot(c.root);
      if (context->rank == c.root && !c.in_place) {
        opts.setInput(static_cast<T*>(c.in.data), static_cast<size_t>(c.in.count));
      }
      opts.setOutput(static_cast<T*>(c.out.data), static_cast<size_t>(c.out.count));
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::run_allgather(const Collective& c) {
  return submit(c, [context = context_, c, timeout = timeout()] {
    with_storage_type(c.dtype(), [&]<typename T>() {
      gloo::AllgatherOptions opts(context);
      // In place, this rank's slice of the output already holds its input.
      if (!c.in_place) opts.setInput(static_cast<T*>(c.in.data), static_cast<size_t>(c.in.count));
      opts.setOutput(static_cast<T*>(c.out.data), static_cast<size_t>(c.out.count));
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::run_reduce_scatter(const Collective& c) {
  return submit(c, [context = context_, c, timeout = timeout(), round = round_bytes_, peak = peak_temporary_] {
    peak->note(gloo_reduce_scatter(context, c.in.data, c.out.data, c.out.count, c.dtype(), c.reduce,
                                   static_cast<uint32_t>(c.seq), timeout, round));
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, c.out.count, context->size);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::run_barrier(const Collective& c) {
  return submit(c, [context = context_, c, timeout = timeout()] {
    gloo::BarrierOptions opts(context);
    opts.setTag(static_cast<uint32_t>(c.seq));
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args) {
  return std::make_shared<ProcessGroupGloo>(args);
}

}  // namespace tandem
