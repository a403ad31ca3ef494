// ProcessGroupGloo: each op becomes one Gloo call on the communication thread.
// Tags are the op's sequence number, so a late message of one op can never be taken
// for another's.
#include "collectives/gloo/process_group_gloo.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <gloo/algorithm.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce_scatter.h>
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

// Gloo's old-style reduce-scatter takes a plain function pointer per element type.
template <typename T, DType D, ReduceOp Op>
void reduce_into(T* x, const T* y, size_t n) {
  reduce_elements(D, Op, x, x, y, static_cast<int64_t>(n));
}

template <typename T, DType D>
typename gloo::ReductionFunction<T>::Function* reduction_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return &reduce_into<T, D, ReduceOp::sum>;
    case ReduceOp::min: return &reduce_into<T, D, ReduceOp::min>;
    case ReduceOp::max: return &reduce_into<T, D, ReduceOp::max>;
  }
  return nullptr;
}

template <typename T>
void run_reduce_scatter_halving_doubling(const std::shared_ptr<gloo::Context>& context, T* data,
                                         int64_t n, typename gloo::ReductionFunction<T>::Function* fn) {
  const int64_t total = n * context->size;
  if (total > INT32_MAX) {
    throw std::invalid_argument("gloo reduce_scatter: " + std::to_string(total) +
                                " elements exceed Gloo's int count");
  }
  gloo::ReductionFunction<T> reduction(gloo::CUSTOM, fn);
  std::vector<int> recv_counts(context->size, static_cast<int>(n));
  gloo::ReduceScatterHalvingDoubling<T> algorithm(context, {data}, static_cast<int>(total), recv_counts,
                                                  &reduction);
  algorithm.run();
}

}  // namespace

void gloo_reduce_scatter_in_place(const std::shared_ptr<gloo::Context>& context, void* data,
                                  int64_t count_per_rank, DType dtype, ReduceOp op) {
  const ReduceOp eop = engine_op(op);
  switch (dtype) {
    case DType::f32:
      return run_reduce_scatter_halving_doubling<float>(context, static_cast<float*>(data), count_per_rank,
                                                        reduction_for<float, DType::f32>(eop));
    case DType::f16:
      return run_reduce_scatter_halving_doubling<uint16_t>(context, static_cast<uint16_t*>(data), count_per_rank,
                                                           reduction_for<uint16_t, DType::f16>(eop));
    case DType::bf16:
      return run_reduce_scatter_halving_doubling<uint16_t>(context, static_cast<uint16_t*>(data), count_per_rank,
                                                           reduction_for<uint16_t, DType::bf16>(eop));
    case DType::i32:
      return run_reduce_scatter_halving_doubling<int32_t>(context, static_cast<int32_t*>(data), count_per_rank,
                                                          reduction_for<int32_t, DType::i32>(eop));
    case DType::i64:
      return run_reduce_scatter_halving_doubling<int64_t>(context, static_cast<int64_t*>(data), count_per_rank,
                                                          reduction_for<int64_t, DType::i64>(eop));
    case DType::u8:
      return run_reduce_scatter_halving_doubling<uint8_t>(context, static_cast<uint8_t*>(data), count_per_rank,
                                                          reduction_for<uint8_t, DType::u8>(eop));
  }
}

ProcessGroupGloo::ProcessGroupGloo(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"gloo", args.rank, args.size, args.timeout, args.store, args.server}) {
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
  return submit(c, [context = context_, c] {
    const int64_t n = c.out.count;
    const size_t slice_bytes = c.out.bytes();
    if (c.in_place) {
      // The algorithm leaves this rank's result at the front of the buffer.
      gloo_reduce_scatter_in_place(context, c.in.data, n, c.dtype(), c.reduce);
      if (c.out.data != c.in.data) std::memmove(c.out.data, c.in.data, slice_bytes);
    } else {
      // It also overwrites its input, which out of place must stay intact.
      std::vector<char> scratch(static_cast<const char*>(c.in.data),
                                static_cast<const char*>(c.in.data) + c.in.bytes());
      gloo_reduce_scatter_in_place(context, scratch.data(), n, c.dtype(), c.reduce);
      std::memcpy(c.out.data, scratch.data(), slice_bytes);
    }
    if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, n, context->size);
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
