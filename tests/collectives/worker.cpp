// tandem_collectives_worker: one rank of a multi-process collectives test, started by
// tandem_test_spawn (gloo) or mpirun (mpi). Every check compares with an exactly
// predictable value; failures print "rank R: FAIL ..." and the rank exits 1.
//
//   --scenario ops        every op x dtype x reduce op x count (0, 1, 7, 4097, 1M+3 per
//                         rank), in and out of place; many outstanding handles
//                         completing in order; sequence numbers. --max-count N leaves
//                         out the counts above N (an emulated cross build's tests)
//   --scenario init       rendezvous only (the driver starts fewer ranks than WORLD_SIZE)
//   --scenario skip       the last rank skips allreduce #2; the others must fail within
//                         --timeout-s naming op, seq, bytes and the missing rank
//   --scenario mismatch   the last rank issues op #2 differently (--case count|zero|op|
//                         dtype); every rank must report how the ranks disagree
//   --scenario kill       rank 1 SIGKILLs itself right after issuing a long allreduce;
//                         the others must fail within --timeout-s with an error naming
//                         rank 1, and (shm) no /dev/shm entry of the job may remain
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "tests/collectives/worker_check.h"
#include "collectives/reduce_kernels.h"

using namespace tandem;
using namespace tandem_test;

namespace {


// Rank r's element i: small positive integers, exact in every dtype when summed (at
// most 13 * size; u8 and bf16 hold every integer up to 255 and 256). Periodic in i
// with period 13, so every input and every expected result is a 13-entry table.
constexpr int64_t kPeriod = 13;
double value(int r, int64_t i) { return static_cast<double>((r * 7 + i) % kPeriod + 1); }

// Per-rank element counts: empty, one, odd, past a page, and past Gloo's 1 MiB segments.
constexpr int64_t kCounts[] = {0, 1, 7, 4097, 1048579};

// Host memory of `capacity` elements of any dtype (8-byte aligned), zero-filled.
struct HostBuf {
  std::vector<uint64_t> storage;
  DType dtype;
  int64_t capacity;
  HostBuf(DType d, int64_t n) : storage((n * dtype_size(d) + 7) / 8 + 1), dtype(d), capacity(n) {}
  void* at(int64_t first) { return reinterpret_cast<char*>(storage.data()) + first * dtype_size(dtype); }
  const void* at(int64_t first) const {
    return reinterpret_cast<const char*>(storage.data()) + first * dtype_size(dtype);
  }
  Buffer buf(int64_t first, int64_t n) { return Buffer{at(first), n, dtype, Device::cpu()}; }
  double get(int64_t i) const { return load_element(dtype, storage.data(), i); }
  void set(int64_t i, double v) { store_element(dtype, storage.data(), i, v); }
};

// One period of values in a dtype: entry k is what element i holds when i % 13 == k.
struct Pattern {
  HostBuf values;
  explicit Pattern(DType d) : values(d, kPeriod) {}
};

Pattern input_pattern(DType d, int r) {
  Pattern p(d);
  for (int64_t k = 0; k < kPeriod; ++k) p.values.set(k, value(r, k));
  return p;
}

// The exact result of reducing every rank's value with op in dtype d, as the backends
// define it (avg: the exact sum, then divide_elements in d).
Pattern reduced_pattern(DType d, ReduceOp op, int n) {
  Pattern p(d);
  for (int64_t k = 0; k < kPeriod; ++k) {
    double r = value(0, k);
    for (int q = 1; q < n; ++q) {
      if (op == ReduceOp::min) r = std::min(r, value(q, k));
      else if (op == ReduceOp::max) r = std::max(r, value(q, k));
      else r += value(q, k);
    }
    p.values.set(k, r);
  }
  if (op == ReduceOp::avg) divide_elements(d, p.values.at(0), kPeriod, n);
  return p;
}

// Element storage as an unsigned integer of the element's width: compares bit-exactly
// (a float result is only right if every bit is) and lets one loop serve every dtype.
template <typename F>
void with_bits(DType d, F&& f) {
  switch (dtype_size(d)) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

// dst[i] = pattern entry (phase + i) % 13, for i < n.
void fill(HostBuf& dst, int64_t first, int64_t n, const Pattern& p, int64_t phase) {
  with_bits(dst.dtype, [&]<typename T>() {
    T* out = static_cast<T*>(dst.at(first));
    const T* table = static_cast<const T*>(p.values.at(0));
    for (int64_t i = 0, k = phase % kPeriod; i < n; ++i) {
      out[i] = table[k];
      if (++k == kPeriod) k = 0;
    }
  });
}

// How many of the n elements from `first` differ from the pattern (bitwise).
int64_t mismatches(const HostBuf& got, int64_t first, int64_t n, const Pattern& p, int64_t phase) {
  int64_t wrong = 0;
  with_bits(got.dtype, [&]<typename T>() {
    const T* in = static_cast<const T*>(got.at(first));
    const T* table = static_cast<const T*>(p.values.at(0));
    for (int64_t i = 0, k = phase % kPeriod; i < n; ++i) {
      wrong += in[i] != table[k];
      if (++k == kPeriod) k = 0;
    }
  });
  return wrong;
}

void zero(HostBuf& b, int64_t first, int64_t n) { std::memset(b.at(first), 0, n * dtype_size(b.dtype)); }

// Every op x reduce op x dtype x count, in and out of place, on two buffers sized for
// the largest count. Outputs start as 0, which no correct result holds (every value,
// minimum and truncated average is >= 1), and the element just past each op's output
// must stay 0; out of place, the input must be left as it was.
struct OpsRun {
  ProcessGroup& g;
  int n, rank;
  uint64_t expected_seq;

  void wait_for(const std::shared_ptr<Work>& w, const std::string& what) {
    CHECK(w->seq() == ++expected_seq, "%s: seq %llu, expected %llu", what.c_str(), (unsigned long long)w->seq(),
          (unsigned long long)expected_seq);
    w->wait();
    CHECK(w->is_success(), "%s: handle not successful", what.c_str());
  }
  void expect(int64_t wrong, const std::string& what, const char* which) {
    CHECK(wrong == 0, "%s: %lld elements of %s wrong", what.c_str(), (long long)wrong, which);
  }

  // The result (in a in place, else in b), the element past it (never written) and, out
  // of place, the input (left alone).
  void expect_result(HostBuf& a, HostBuf& b, int64_t count, const Pattern& want, const Pattern& mine, bool in_place,
                     const std::string& what) {
    HostBuf& out = in_place ? a : b;
    expect(mismatches(out, 0, count, want, 0), what, "the result");
    expect(out.get(count) != 0, what, "the guard past the output");
    if (!in_place) expect(mismatches(a, 0, count, mine, 0), what, "the input");
  }

  void allreduce(HostBuf& a, HostBuf& b, int64_t count, ReduceOp op, bool in_place, const std::string& what) {
    const DType d = a.dtype;
    const Pattern mine = input_pattern(d, rank), want = reduced_pattern(d, op, n);
    fill(a, 0, count, mine, 0);
    zero(a, count, 1);
    zero(b, 0, count + 1);
    wait_for(in_place ? g.allreduce(a.buf(0, count), op) : g.allreduce(a.buf(0, count), b.buf(0, count), op), what);
    expect_result(a, b, count, want, mine, in_place, what);
  }

  void broadcast(HostBuf& a, HostBuf& b, int64_t count, bool in_place, const std::string& what) {
    const DType d = a.dtype;
    const int root = n - 1;  // not 0, to catch a root ignored
    const Pattern mine = input_pattern(d, rank), want = input_pattern(d, root);
    fill(a, 0, count, mine, 0);  // non-roots' inputs must be ignored
    zero(a, count, 1);
    zero(b, 0, count + 1);
    wait_for(in_place ? g.broadcast(a.buf(0, count), root) : g.broadcast(a.buf(0, count), b.buf(0, count), root),
             what);
    expect_result(a, b, count, want, mine, in_place, what);
  }

  void allgather(HostBuf& a, HostBuf& b, int64_t count, bool in_place, const std::string& what) {
    const DType d = a.dtype;
    const Pattern mine = input_pattern(d, rank);
    zero(b, 0, count * n + 1);
    if (in_place) {
      fill(b, rank * count, count, mine, 0);
    } else {
      fill(a, 0, count, mine, 0);
    }
    wait_for(in_place ? g.allgather(b.buf(0, count * n)) : g.allgather(a.buf(0, count), b.buf(0, count * n)), what);
    int64_t wrong = 0;
    for (int r = 0; r < n; ++r) wrong += mismatches(b, r * count, count, input_pattern(d, r), 0);
    expect(wrong, what, "the result");
    expect(b.get(count * n) != 0, what, "the guard past the output");
    if (!in_place) expect(mismatches(a, 0, count, mine, 0), what, "the input");
  }

  void reduce_scatter(HostBuf& a, HostBuf& b, int64_t count, ReduceOp op, bool in_place, const std::string& what) {
    const DType d = a.dtype;
    const Pattern mine = input_pattern(d, rank), want = reduced_pattern(d, op, n);
    fill(a, 0, count * n, mine, 0);
    zero(a, count * n, 1);
    zero(b, 0, count + 1);
    wait_for(in_place ? g.reduce_scatter(a.buf(0, count * n), op)
                      : g.reduce_scatter(a.buf(0, count * n), b.buf(0, count), op),
             what);
    // In place, the result is slice `rank` (the other slices are unspecified).
    HostBuf& out = in_place ? a : b;
    const int64_t at = in_place ? rank * count : 0;
    expect(mismatches(out, at, count, want, rank * count), what, "the result");
    expect(out.get(in_place ? count * n : count) != 0, what, "the guard past the output");
    if (!in_place) expect(mismatches(a, 0, count * n, mine, 0), what, "the input");
  }
};

void test_ops(ProcessGroup& g, int64_t max_count) {
  const int n = g.size(), rank = g.rank();
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  const ReduceOp reduce_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
  OpsRun run{g, n, rank, g.last_seq()};
  for (int64_t count : kCounts) {
    if (count > max_count) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t first_seq = run.expected_seq + 1;
    for (DType d : dtypes) {
      // Sized for the largest op of this count (allgather's output, reduce_scatter's
      // input) plus the guard element.
      HostBuf a(d, count * n + 1), b(d, count * n + 1);
      for (bool in_place : {false, true}) {
        const std::string tail = std::string(dtype_name(d)) + " " + std::to_string(count) + " elements per rank " +
                                 (in_place ? "in place" : "out of place");
        for (ReduceOp op : reduce_ops) {
          run.allreduce(a, b, count, op, in_place, std::string("allreduce ") + reduce_op_str(op) + " " + tail);
        }
        run.broadcast(a, b, count, in_place, "broadcast " + tail);
        run.allgather(a, b, count, in_place, "allgather " + tail);
        for (ReduceOp op : reduce_ops) {
          run.reduce_scatter(a, b, count, op, in_place,
                             std::string("reduce_scatter ") + reduce_op_str(op) + " " + tail);
        }
      }
    }
    if (rank == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("rank 0: %lld elements per rank: ops #%llu-#%llu in %.2f s\n", (long long)count,
                  (unsigned long long)first_seq, (unsigned long long)run.expected_seq, s);
      std::fflush(stdout);
    }
  }
  uint64_t expected_seq = run.expected_seq;
  // Many outstanding handles: issued back to back, they complete in order.
  {
    constexpr int kHandles = 64;
    std::vector<HostBuf> bufs;
    for (int k = 0; k < kHandles; ++k) {
      bufs.emplace_back(DType::i32, 1000);
      for (int64_t i = 0; i < 1000; ++i) bufs.back().set(i, k + rank);
    }
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kHandles; ++k) works.push_back(g.allreduce(bufs[k].buf(0, 1000)));
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
      for (int64_t i = 0; i < 1000; ++i) wrong += bufs[k].get(i) != want;
    }
    CHECK(wrong == 0, "outstanding handles: %lld wrong", (long long)wrong);
  }
  // Bad arguments throw at once and consume no sequence number.
  {
    HostBuf a(DType::f32, 10), b(DType::f32, 11);
    bool threw = false;
    try {
      g.allreduce(a.buf(0, 10), b.buf(0, 11));
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

// The last rank issues op #2 differently from the others (--case count: 999 elements
// instead of 1000; zero: 0 instead of 7; op: broadcast instead of allreduce; dtype: i32
// instead of f32, the same bytes). With the op check on, every rank must get a
// CollectiveError saying how the ranks disagree, and op #3 must then fail at once.
// With --detected 0 (the check turned off) op #2 must simply complete: nothing caught.
int test_mismatch(ProcessGroup& g, const std::string& which, bool detected) {
  const bool odd = g.rank() == g.size() - 1;
  std::vector<float> f(1000, 1.0f);
  std::vector<int32_t> i(1000, 1);
  g.allreduce(cpu_buffer(f.data(), 1000))->wait();  // #1: the group works
  std::shared_ptr<Work> w;
  if (which == "count") {
    w = g.allreduce(cpu_buffer(f.data(), odd ? 999 : 1000));
  } else if (which == "zero") {
    w = g.allreduce(cpu_buffer(f.data(), odd ? 0 : 7));
  } else if (which == "op") {
    w = odd ? g.broadcast(cpu_buffer(f.data(), 1000), 0) : g.allreduce(cpu_buffer(f.data(), 1000));
  } else if (which == "dtype") {
    w = odd ? g.allreduce(cpu_buffer(i.data(), 1000)) : g.allreduce(cpu_buffer(f.data(), 1000));
  } else {
    std::printf("rank %d: unknown --case %s (count, zero, op, dtype)\n", g.rank(), which.c_str());
    return 2;
  }
  try {
    w->wait();
    std::printf("rank %d: %s mismatch not reported\n", g.rank(), which.c_str());
    return detected ? 1 : 0;
  } catch (const CollectiveTimeout& e) {
    std::printf("rank %d: FAIL: timed out instead of reporting the mismatch: %s\n", g.rank(), e.what());
    return 1;
  } catch (const CollectiveError& e) {
    std::printf("rank %d: reported: %s\n", g.rank(), e.what());
    if (!detected) return 1;
  }
  std::fflush(stdout);
  try {
    g.allreduce(cpu_buffer(f.data(), 1000))->wait();
    std::printf("rank %d: FAIL: an op after the mismatch succeeded\n", g.rank());
    return 1;
  } catch (const CollectiveError& e) {
    std::printf("rank %d: later op failed fast: %s\n", g.rank(), e.what());
  }
  std::fflush(stdout);
  return 0;
}

// Entries of /dev/shm whose name contains the job id (the shm backend's segment name
// starts "tandem-<job id>-").
std::vector<std::string> shm_entries_of_job() {
  std::vector<std::string> found;
  const char* job = std::getenv("TANDEM_JOB_ID");
  if (!job || !*job) return found;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::strstr(e->d_name, job)) found.push_back(e->d_name);
    }
    closedir(dir);
  }
  return found;
}

// Rank 1 dies (SIGKILL, no clean-up) inside a long op; every other rank must fail with
// an error naming rank 1 well before a generous timeout, and the group must then
// refuse later ops.
int test_kill(ProcessGroup& g) {
  const int victim = 1;
  const int64_t count = 64 << 20;  // 256 MiB of f32: many rounds
  std::vector<float> data(count, 1.0f);
  g.allreduce(cpu_buffer(data.data(), 1024))->wait();  // #1, everyone
  const auto left = shm_entries_of_job();
  std::printf("rank %d: %zu /dev/shm entries of the job after set-up\n", g.rank(), left.size());
  std::fflush(stdout);
  auto w = g.allreduce(cpu_buffer(data.data(), count));  // #2
  if (g.rank() == victim) raise(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    w->wait();
    std::printf("rank %d: FAIL: allreduce #2 completed without rank %d\n", g.rank(), victim);
    return 1;
  } catch (const std::exception& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d: failed as expected (%s after %.1f s): %s\n", g.rank(),
                s < g.timeout().count() / 2000.0 ? "well within the timeout" : "LATE", s, e.what());
  }
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = "ops", backend = "auto", mismatch_case = "count";
  bool detected = true;
  double timeout_s = 60, rendezvous_s = 60;
  int64_t max_count = kCounts[std::size(kCounts) - 1];
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--scenario") scenario = argv[i + 1];
    else if (a == "--backend") backend = argv[i + 1];
    else if (a == "--timeout-s") timeout_s = std::stod(argv[i + 1]);
    else if (a == "--rendezvous-timeout-s") rendezvous_s = std::stod(argv[i + 1]);
    else if (a == "--case") mismatch_case = argv[i + 1];
    else if (a == "--detected") detected = std::string(argv[i + 1]) != "0";
    else if (a == "--max-count") max_count = std::stoll(argv[i + 1]);
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
    if (scenario == "kill") return test_kill(*group);
    if (scenario == "mismatch") return test_mismatch(*group, mismatch_case, detected);
    test_ops(*group, max_count);
    std::printf("rank %d: %s world %d: %d checks, %d failed\n", g_rank, group->backend_name().c_str(),
                group->size(), g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
}
