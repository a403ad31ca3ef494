// tandem_collectives_worker: one rank of a multi-process collectives test, started by
// tandem_test_spawn (gloo) or mpirun (mpi). Every check compares with an exactly
// predictable value; failures print "rank R: FAIL ..." and the rank exits 1.
//
//   --scenario ops        every op x dtype x reduce op, in and out of place; many
//                         outstanding handles completing in order; sequence numbers
//   --scenario init       rendezvous only (the driver starts fewer ranks than WORLD_SIZE)
//   --scenario skip       the last rank skips allreduce #2; the others must fail within
//                         --timeout-s naming op, seq, bytes and the missing rank
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "collectives/reduce_kernels.h"

using namespace tandem;

namespace {

int g_failures = 0;  // test-program tally (main's only state)
int g_checks = 0;
int g_rank = -1;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    ++g_checks;                                                             \
    if (!(cond)) {                                                          \
      ++g_failures;                                                         \
      std::printf("rank %d: FAIL %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                             \
      std::printf("\n");                                                    \
    }                                                                       \
  } while (0)

// Rank r's element i: small positive integers, exact in every dtype when summed.
double value(int r, int64_t i) { return static_cast<double>((r * 7 + i) % 13 + 1); }

struct HostBuf {
  std::vector<uint64_t> storage;  // 8-byte aligned for every dtype
  DType dtype;
  int64_t count;
  HostBuf(DType d, int64_t n) : storage((n * dtype_size(d) + 7) / 8 + 1), dtype(d), count(n) {}
  Buffer buf() { return Buffer{storage.data(), count, dtype, Device::cpu()}; }
  double at(int64_t i) const { return load_element(dtype, storage.data(), i); }
  void set(int64_t i, double v) { store_element(dtype, storage.data(), i, v); }
};

// The exact result of reducing `vals` with op in dtype, as the backends define it.
double reduce_expected(DType d, ReduceOp op, const std::vector<double>& vals, int n) {
  double r = vals[0];
  for (size_t k = 1; k < vals.size(); ++k) {
    if (op == ReduceOp::min) r = std::min(r, vals[k]);
    else if (op == ReduceOp::max) r = std::max(r, vals[k]);
    else r += vals[k];
  }
  if (op != ReduceOp::avg) return r;
  HostBuf tmp(d, 1);
  tmp.set(0, r);
  divide_elements(d, tmp.storage.data(), 1, n);
  return tmp.at(0);
}

void test_ops(ProcessGroup& g) {
  const int n = g.size(), rank = g.rank();
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  const std::vector<ReduceOp> reduce_ops = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
  const int64_t per_rank = 257;  // odd: uneven chunks inside the engines
  uint64_t expected_seq = g.last_seq();
  for (DType d : dtypes) {
    const char* dn = dtype_name(d);
    for (bool in_place : {false, true}) {
      const char* where = in_place ? "in place" : "out of place";
      // allreduce
      for (ReduceOp op : reduce_ops) {
        HostBuf in(d, per_rank), out(d, per_rank);
        for (int64_t i = 0; i < per_rank; ++i) in.set(i, value(rank, i));
        auto w = in_place ? g.allreduce(in.buf(), op) : g.allreduce(in.buf(), out.buf(), op);
        CHECK(w->seq() == ++expected_seq, "allreduce seq %llu, expected %llu", (unsigned long long)w->seq(),
              (unsigned long long)expected_seq);
        w->wait();
        CHECK(w->is_completed() && w->is_success(), "allreduce handle not successful");
        HostBuf& res = in_place ? in : out;
        int64_t wrong = 0;
        for (int64_t i = 0; i < per_rank; ++i) {
          std::vector<double> vals;
          for (int r = 0; r < n; ++r) vals.push_back(value(r, i));
          wrong += res.at(i) != reduce_expected(d, op, vals, n);
        }
        CHECK(wrong == 0, "allreduce %s %s %s: %lld wrong", dn, reduce_op_str(op), where, (long long)wrong);
      }
      // broadcast from the last rank (not 0, to catch a root ignored)
      {
        const int root = n - 1;
        HostBuf in(d, per_rank), out(d, per_rank);
        for (int64_t i = 0; i < per_rank; ++i) in.set(i, rank == root ? value(root, i) : 0);
        auto w = in_place ? g.broadcast(in.buf(), root) : g.broadcast(in.buf(), out.buf(), root);
        CHECK(w->seq() == ++expected_seq, "broadcast seq");
        w->wait();
        HostBuf& res = in_place ? in : out;
        int64_t wrong = 0;
        for (int64_t i = 0; i < per_rank; ++i) wrong += res.at(i) != value(root, i);
        CHECK(wrong == 0, "broadcast %s %s: %lld wrong", dn, where, (long long)wrong);
      }
      // allgather
      {
        HostBuf in(d, per_rank), out(d, per_rank * n);
        HostBuf& src = in_place ? out : in;
        const int64_t base = in_place ? rank * per_rank : 0;
        for (int64_t i = 0; i < per_rank; ++i) src.set(base + i, value(rank, i));
        auto w = in_place ? g.allgather(out.buf()) : g.allgather(in.buf(), out.buf());
        CHECK(w->seq() == ++expected_seq, "allgather seq");
        w->wait();
        int64_t wrong = 0;
        for (int64_t i = 0; i < per_rank * n; ++i) wrong += out.at(i) != value(static_cast<int>(i / per_rank), i % per_rank);
        CHECK(wrong == 0, "allgather %s %s: %lld wrong", dn, where, (long long)wrong);
      }
      // reduce_scatter
      for (ReduceOp op : reduce_ops) {
        HostBuf in(d, per_rank * n), out(d, per_rank);
        for (int64_t i = 0; i < per_rank * n; ++i) in.set(i, value(rank, i));
        auto w = in_place ? g.reduce_scatter(in.buf(), op) : g.reduce_scatter(in.buf(), out.buf(), op);
        CHECK(w->seq() == ++expected_seq, "reduce_scatter seq");
        w->wait();
        int64_t wrong = 0;
        for (int64_t i = 0; i < per_rank; ++i) {
          const int64_t j = rank * per_rank + i;
          std::vector<double> vals;
          for (int r = 0; r < n; ++r) vals.push_back(value(r, j));
          const double got = in_place ? in.at(j) : out.at(i);
          wrong += got != reduce_expected(d, op, vals, n);
        }
        CHECK(wrong == 0, "reduce_scatter %s %s %s: %lld wrong", dn, reduce_op_str(op), where, (long long)wrong);
        if (!in_place) {  // out of place leaves the input alone
          int64_t changed = 0;
          for (int64_t i = 0; i < per_rank * n; ++i) changed += in.at(i) != value(rank, i);
          CHECK(changed == 0, "reduce_scatter %s modified its input", dn);
        }
      }
    }
  }
  // A large allreduce: several engine segments (Gloo cuts at 1 MiB).
  {
    const int64_t count = (3 << 20) / 4 + 5;
    HostBuf buf(DType::f32, count);
    for (int64_t i = 0; i < count; ++i) buf.set(i, value(rank, i));
    g.allreduce(buf.buf())->wait();
    ++expected_seq;
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += value(r, i);
      wrong += buf.at(i) != want;
    }
    CHECK(wrong == 0, "large allreduce: %lld wrong", (long long)wrong);
  }
  // Many outstanding handles: issued back to back, they complete in order.
  {
    constexpr int kHandles = 64;
    std::vector<HostBuf> bufs;
    for (int k = 0; k < kHandles; ++k) {
      bufs.emplace_back(DType::i32, 1000);
      for (int64_t i = 0; i < 1000; ++i) bufs.back().set(i, k + rank);
    }
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kHandles; ++k) works.push_back(g.allreduce(bufs[k].buf()));
    for (int k = 0; k < kHandles; ++k) {
      CHECK(works[k]->seq() == expected_seq + 1 + k, "handle %d has seq %llu", k, (unsigned long long)works[k]->seq());
    }
    expected_seq += kHandles;
    CHECK(g.last_seq() == expected_seq, "last_seq %llu, expected %llu", (unsigned long long)g.last_seq(),
          (unsigned long long)expected_seq);
    works.back()->wait();
    int not_done = 0;
    for (auto& w : works) not_done += !w->is_completed();  // all earlier ones must be done
    CHECK(not_done == 0, "%d handles issued before the last one are not complete", not_done);
    int64_t wrong = 0;
    for (int k = 0; k < kHandles; ++k) {
      const double want = k * n + n * (n - 1) / 2;
      for (int64_t i = 0; i < 1000; ++i) wrong += bufs[k].at(i) != want;
    }
    CHECK(wrong == 0, "outstanding handles: %lld wrong", (long long)wrong);
  }
  // Bad arguments throw at once and consume no sequence number.
  {
    HostBuf a(DType::f32, 10), b(DType::f32, 11);
    bool threw = false;
    try {
      g.allreduce(a.buf(), b.buf());
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw, "mismatched counts were accepted");
    CHECK(g.last_seq() == expected_seq, "a rejected op consumed a sequence number");
  }
  auto w = g.barrier();
  CHECK(w->seq() == ++expected_seq, "barrier seq");
  w->wait();
}

// Rank size-1 skips allreduce #2; every other rank must fail on it within the timeout.
int test_skip(ProcessGroup& g) {
  const int skipper = g.size() - 1;
  std::vector<float> data(1024, 1.0f);
  g.allreduce(cpu_buffer(data.data(), 1024))->wait();  // #1, everyone
  if (g.rank() == skipper) {
    std::printf("rank %d: skipping allreduce #2\n", g.rank());
    std::fflush(stdout);
    // Stay alive (so the others time out rather than see a closed connection) until a
    // failing rank says it is done; bounded like every wait.
    try {
      g.store()->get("test/released", std::chrono::seconds(60));
    } catch (const std::exception& e) {
      std::printf("rank %d: released by a closed store (%s)\n", g.rank(), e.what());
    }
    return 0;
  }
  auto w = g.allreduce(cpu_buffer(data.data(), 1024));  // #2
  try {
    w->wait();
    std::printf("rank %d: FAIL: allreduce #2 completed without rank %d\n", g.rank(), skipper);
    return 1;
  } catch (const CollectiveTimeout& e) {
    std::printf("rank %d: timeout as expected: %s\n", g.rank(), e.what());
  } catch (const std::exception& e) {
    std::printf("rank %d: error (not a CollectiveTimeout): %s\n", g.rank(), e.what());
  }
  std::fflush(stdout);
  // Later ops on a broken group fail at once instead of hanging.
  try {
    g.allreduce(cpu_buffer(data.data(), 1024))->wait(std::chrono::seconds(30));
    std::printf("rank %d: FAIL: an op after the timeout succeeded\n", g.rank());
  } catch (const std::exception& e) {
    std::printf("rank %d: later op failed fast: %s\n", g.rank(), e.what());
  }
  if (g.store()) g.store()->set("test/released", "1");
  return 1;  // as a training program would: exit 1 after a collective timeout
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = "ops", backend = "auto";
  double timeout_s = 60, rendezvous_s = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--scenario") scenario = argv[i + 1];
    else if (a == "--backend") backend = argv[i + 1];
    else if (a == "--timeout-s") timeout_s = std::stod(argv[i + 1]);
    else if (a == "--rendezvous-timeout-s") rendezvous_s = std::stod(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    InitOptions options;
    options.backend = parse_backend(backend);
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    options.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(rendezvous_s * 1000));
    auto group = init_process_group(options);
    g_rank = group->rank();
    if (scenario == "init") {
      std::printf("rank %d: initialised %s group of %d\n", g_rank, group->backend_name().c_str(), group->size());
      return 0;
    }
    if (scenario == "skip") return test_skip(*group);
    test_ops(*group);
    std::printf("rank %d: %s world %d: %d checks, %d failed\n", g_rank, group->backend_name().c_str(),
                group->size(), g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
}
