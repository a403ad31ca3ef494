// ProcessGroupGloo: each op becomes one Gloo call on the communication thread.
// Tags are the op's sequence number, so a late message of one op can never be taken
// for another's; the op check's gathers use tags of their own (check_tag).
#include "collectives/gloo/process_group_gloo.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/gloo/gloo_store.h"
#include "collectives/reduce_kernels.h"

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

void gloo_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* in, void* out,
                         int64_t count_per_rank, DType dtype, ReduceOp op, uint32_t tag,
                         std::chrono::milliseconds timeout) {
  const size_t slice_bytes = static_cast<size_t>(count_per_rank) * dtype_size(dtype);
  const size_t total_bytes = slice_bytes * static_cast<size_t>(context->size);
  // received[r] = rank r's slice `rank`: every slice of ours crosses the wire once,
  // as in a ring reduce-scatter, and alltoall waits for its sends before returning.
  std::vector<uint8_t> received(total_bytes);
  gloo::AlltoallOptions opts(context);
  opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), total_bytes);  // Gloo only reads it
  opts.setOutput(received.data(), total_bytes);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::alltoall(opts);
  // In rank order, so the result does not depend on arrival order.
  std::memcpy(out, received.data(), slice_bytes);
  for (int r = 1; r < context->size; ++r)
    reduce_elements(dtype, engine_op(op), out, out, received.data() + r * slice_bytes, count_per_rank);
}

ProcessGroupGloo::ProcessGroupGloo(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"gloo", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}) {
  if (!args.store) throw CollectiveError("the gloo backend needs a store to connect its ranks");
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
  return submit(c, [context = context_, c, timeout = timeout()] {
    // In place, out is slice `rank` of in; the input is fully sent before out is written.
    gloo_reduce_scatter(context, c.in.data, c.out.data, c.out.count, c.dtype(), c.reduce,
                        static_cast<uint32_t>(c.seq), timeout);
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
