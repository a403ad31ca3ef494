// Benchmark harness (see bench_harness.h): data, checks, timing and the tables.
#include "collectives/bench/bench_harness.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "collectives/reduce_kernels.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Rank r's input element i: small integers, so any sum over ranks is exact in f32, f16
// and bf16 alike (bf16 holds every integer up to 256: up to 64 ranks).
double value(int r, int64_t i) { return static_cast<double>((r + i) % 4 + 1); }

double bus_factor(OpType op, int n) {
  switch (op) {
    case OpType::allreduce: return 2.0 * (n - 1) / n;
    case OpType::allgather:
    case OpType::reduce_scatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

class HostMemory : public Memory {
 public:
  Device device() const override { return Device::cpu(); }
  void* alloc(size_t bytes) override { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096); }
  void free(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

class GroupPath : public Path {
 public:
  explicit GroupPath(ProcessGroup& g) : group_(g) {}
  std::string name() const override { return "tandem " + group_.backend_name() + " process group"; }
  std::shared_ptr<Work> issue(const Collective& c) override {
    switch (c.op) {
      case OpType::allreduce: return group_.allreduce(c.in, c.out, c.reduce);
      case OpType::broadcast: return group_.broadcast(c.in, c.out, c.root);
      case OpType::allgather: return group_.allgather(c.in, c.out);
      case OpType::reduce_scatter: return group_.reduce_scatter(c.in, c.out, c.reduce);
      case OpType::barrier: return group_.barrier();
    }
    return nullptr;
  }
  void drain(std::shared_ptr<Work> last) override {
    if (last) last->synchronize(group_.timeout());
  }

 private:
  ProcessGroup& group_;
};

// One int64 reduced over the group, through the memory the group works on.
int64_t reduce_i64(ProcessGroup& group, Memory& memory, int64_t v, ReduceOp op) {
  void* d = memory.alloc(sizeof(int64_t));
  memory.to_device(d, &v, sizeof(v));
  group.allreduce(Buffer{d, 1, DType::i64, memory.device()}, op)->synchronize(group.timeout());
  memory.to_host(&v, d, sizeof(v));
  memory.free(d);
  return v;
}

void sync_ranks(ProcessGroup& group) { group.barrier()->synchronize(group.timeout()); }

// The out-of-place or in-place form of the configured op on the two buffers.
Collective make_op(const Config& cfg, const ProcessGroup& g, void* in_buf, void* out_buf, int64_t count,
                   bool in_place, Device device) {
  const int64_t per_rank = count / g.size();
  const Buffer in{in_buf, count, cfg.dtype, device};
  const Buffer out{out_buf, count, cfg.dtype, device};
  Collective c;
  c.op = cfg.op;
  c.root = cfg.root;
  c.in_place = in_place;
  switch (cfg.op) {
    case OpType::allreduce:
    case OpType::broadcast:
      c.in = in_place ? out : in;
      c.out = out;
      break;
    case OpType::allgather:
      c.out = out;
      c.in = in_place ? out.slice(g.rank() * per_rank, per_rank) : Buffer{in_buf, per_rank, cfg.dtype, device};
      break;
    case OpType::reduce_scatter:
      c.in = in_place ? out : in;
      c.out = in_place ? out.slice(g.rank() * per_rank, per_rank) : Buffer{out_buf, per_rank, cfg.dtype, device};
      break;
    case OpType::barrier: break;
  }
  return c;
}

// Fills the inputs of c (in device memory) with this rank's pattern and the rest of
// the output with 0, which no correct result contains.
void fill(const Config& cfg, const ProcessGroup& g, Memory& memory, const Collective& c,
          std::vector<char>& host, void* out_buf, int64_t count) {
  const size_t eb = dtype_size(cfg.dtype);
  const int64_t out_total = cfg.op == OpType::reduce_scatter ? (c.in_place ? count : c.out.count) : count;
  std::memset(host.data(), 0, static_cast<size_t>(out_total) * eb);
  memory.to_device(out_buf, host.data(), static_cast<size_t>(out_total) * eb);
  const bool sends = cfg.op != OpType::broadcast || g.rank() == cfg.root;
  const int source = cfg.op == OpType::broadcast ? cfg.root : g.rank();
  if (sends) {
    for (int64_t i = 0; i < c.in.count; ++i) store_element(cfg.dtype, host.data(), i, value(source, i));
    memory.to_device(c.in.data, host.data(), c.in.bytes());
  }
}

int64_t count_wrong(const Config& cfg, const ProcessGroup& g, Memory& memory, const Collective& c,
                    std::vector<char>& host) {
  memory.to_host(host.data(), c.out.data, c.out.bytes());
  const int n = g.size();
  int64_t wrong = 0;
  for (int64_t i = 0; i < c.out.count; ++i) {
    double want = 0;
    switch (cfg.op) {
      case OpType::allreduce:
        for (int r = 0; r < n; ++r) want += value(r, i);
        break;
      case OpType::broadcast: want = value(cfg.root, i); break;
      case OpType::allgather: want = value(static_cast<int>(i / c.in.count), i % c.in.count); break;
      case OpType::reduce_scatter:
        for (int r = 0; r < n; ++r) want += value(r, g.rank() * c.out.count + i);
        break;
      case OpType::barrier: break;
    }
    if (load_element(cfg.dtype, host.data(), i) != want) ++wrong;
  }
  return wrong;
}

Cell measure(const Config& cfg, ProcessGroup& g, Path& path, Memory& memory, const Collective& c,
             std::vector<char>& host, void* out_buf, int64_t count, int64_t bytes) {
  Cell cell;
  if (cfg.check) {
    fill(cfg, g, memory, c, host, out_buf, count);
    sync_ranks(g);
    path.drain(path.issue(c));
    cell.wrong = reduce_i64(g, memory, count_wrong(cfg, g, memory, c, host), ReduceOp::sum);
  }
  std::shared_ptr<Work> last;
  for (int i = 0; i < cfg.warmup; ++i) last = path.issue(c);
  path.drain(last);
  sync_ranks(g);
  const auto t0 = Clock::now();
  if (cfg.wait_each) {
    for (int i = 0; i < cfg.iters; ++i) path.drain(path.issue(c));
  } else {
    for (int i = 0; i < cfg.iters; ++i) last = path.issue(c);
    path.drain(last);
  }
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  // The slowest rank's time is the op's time.
  const int64_t max_ns = reduce_i64(g, memory, ns, ReduceOp::max);
  cell.time_us = static_cast<double>(max_ns) / 1e3 / cfg.iters;
  cell.algbw = static_cast<double>(bytes) / 1e3 / cell.time_us;  // bytes/us = MB/s -> GB/s
  cell.busbw = cell.algbw * bus_factor(cfg.op, g.size());
  return cell;
}

}  // namespace

std::unique_ptr<Path> make_group_path(ProcessGroup& group) { return std::make_unique<GroupPath>(group); }
std::unique_ptr<Memory> make_host_memory() { return std::make_unique<HostMemory>(); }

std::vector<std::vector<Row>> run_sizes(const Config& cfg, ProcessGroup& g, const std::vector<Path*>& paths,
                                        Memory& memory) {
  const size_t eb = dtype_size(cfg.dtype);
  const size_t cap = static_cast<size_t>(cfg.max_bytes) + eb * g.size();
  void* in_buf = memory.alloc(cap);
  void* out_buf = memory.alloc(cap);
  std::vector<char> host(cap);
  std::vector<std::vector<Row>> tables(paths.size());
  // Elements for a size: a multiple of the world size where the op splits the buffer.
  const auto count_for = [&](int64_t bytes) {
    int64_t count = bytes / static_cast<int64_t>(eb);
    if (cfg.op == OpType::allgather || cfg.op == OpType::reduce_scatter) count -= count % g.size();
    return count;
  };
  // Warm every path up at the largest size first, as nccl-tests does: the first large
  // messages pay for connection buffers growing (Gloo's TCP sockets), which must not be
  // charged to whichever path happens to run the first size. Issued back to back, as many
  // ops as a timed loop queues: the first queue of 2,000 small ops paid for its memory
  // (page faults: 4.5 us per 8-byte mpi op in the first size, 2.6 once warm; 2-vCPU EPYC).
  {
    const int warmup = cfg.wait_each ? cfg.warmup : std::max(cfg.warmup, cfg.iters);
    int64_t largest = cfg.min_bytes;
    while (largest <= cfg.max_bytes / cfg.factor) largest *= cfg.factor;
    const int64_t count = count_for(largest);
    if (count > 0) {
      for (Path* path : paths) {
        for (bool in_place : {false, true}) {
          const Collective c = make_op(cfg, g, in_buf, out_buf, count, in_place, memory.device());
          std::shared_ptr<Work> last;
          for (int i = 0; i < warmup; ++i) last = path->issue(c);
          path->drain(last);
        }
      }
    }
  }
  for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.factor) {
    const int64_t count = count_for(bytes);
    if (count > 0) {
      const Collective oop = make_op(cfg, g, in_buf, out_buf, count, false, memory.device());
      const Collective ip = make_op(cfg, g, in_buf, out_buf, count, true, memory.device());
      for (size_t p = 0; p < paths.size(); ++p) {
        Row row;
        row.path = paths[p]->name();
        row.count = count;
        row.bytes = count * static_cast<int64_t>(eb);
        row.out_of_place = measure(cfg, g, *paths[p], memory, oop, host, out_buf, count, row.bytes);
        row.in_place = measure(cfg, g, *paths[p], memory, ip, host, out_buf, count, row.bytes);
        tables[p].push_back(row);
      }
    }
    if (bytes > cfg.max_bytes / cfg.factor) break;  // next step would pass the maximum
  }
  memory.free(in_buf);
  memory.free(out_buf);
  return tables;
}

void print_header(const Config& cfg, const ProcessGroup& g) {
  std::printf("# tandem-bench-collectives: %s, backend %s, %d ranks, dtype %s%s, %d iterations after %d warm-up, %s\n",
              op_str(cfg.op), g.backend_name().c_str(), g.size(), dtype_name(cfg.dtype),
              cfg.op == OpType::allreduce || cfg.op == OpType::reduce_scatter ? ", sum" : "", cfg.iters,
              cfg.warmup, cfg.wait_each ? "each waited before the next" : "issued back to back, the last waited");
  std::printf("# busbw = algbw x %s; #wrong counts result elements that differ from the exact value%s\n",
              cfg.op == OpType::allreduce ? "2(n-1)/n"
              : cfg.op == OpType::broadcast ? "1" : "(n-1)/n",
              cfg.check ? "" : " (N/A: run with --check)");
}

void print_table(const Config& cfg, const std::string& title, const std::vector<Row>& rows) {
  std::printf("#\n# %s\n", title.c_str());
  std::printf("# %10s %12s %6s  %-39s  %s\n", "", "", "", "              out-of-place", "                in-place");
  std::printf("# %10s %12s %6s  %10s %9s %9s %8s  %10s %9s %9s %8s\n", "size", "count", "type", "time", "algbw",
              "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s %12s %6s  %10s %9s %9s %8s  %10s %9s %9s %8s\n", "(B)", "(elements)", "", "(us)", "(GB/s)",
              "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  double busbw_sum = 0;
  for (const Row& r : rows) {
    const auto wrong = [](const Cell& c) { return c.wrong ? std::to_string(*c.wrong) : std::string("N/A"); };
    std::printf("  %10lld %12lld %6s  %10.2f %9.3f %9.3f %8s  %10.2f %9.3f %9.3f %8s\n",
                static_cast<long long>(r.bytes), static_cast<long long>(r.count), dtype_name(cfg.dtype),
                r.out_of_place.time_us, r.out_of_place.algbw, r.out_of_place.busbw, wrong(r.out_of_place).c_str(),
                r.in_place.time_us, r.in_place.algbw, r.in_place.busbw, wrong(r.in_place).c_str());
    busbw_sum += r.in_place.busbw;
  }
  std::printf("# Avg bus bandwidth (in place) : %.3f GB/s\n", rows.empty() ? 0.0 : busbw_sum / rows.size());
  std::fflush(stdout);
}

std::string rows_json(const Config& cfg, const ProcessGroup& g, const std::vector<Row>& rows,
                      const std::string& raw_path) {
  using nlohmann::json;
  json out = {{"op", op_str(cfg.op)},   {"backend", g.backend_name()}, {"world_size", g.size()},
              {"dtype", dtype_name(cfg.dtype)}, {"iters", cfg.iters},  {"warmup", cfg.warmup},
              {"wait_each", cfg.wait_each}, {"rows", json::array()}};
  // One row per size and placement, as the table prints them.
  for (const Row& r : rows) {
    for (bool in_place : {false, true}) {
      const Cell& c = in_place ? r.in_place : r.out_of_place;
      out["rows"].push_back({{"path", r.path},
                             {"raw", r.path == raw_path},
                             {"in_place", in_place},
                             {"size", r.bytes},
                             {"count", r.count},
                             {"time_us", c.time_us},
                             {"algbw", c.algbw},
                             {"busbw", c.busbw},
                             {"wrong", c.wrong ? json(*c.wrong) : json(nullptr)}});
    }
  }
  return out.dump(2);
}

}  // namespace tandem::bench
