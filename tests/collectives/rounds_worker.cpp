// tandem_rounds_worker: one rank of the bounded-temporaries test (issue 22): reduce-scatter
// and all-gather whose slices span several rounds plus a ragged remainder, checked bit
// for bit, and the group's peak_temporary_bytes checked against the exact value the
// backend's header gives. Started like tandem_collectives_worker (tandem_test_spawn, or
// mpirun for mpi). The round is TANDEM_COLLECTIVE_CHUNK_KB (default 1 MiB), which this
// worker reads as the backends do (round_bytes_from_env).
//   --backend B       gloo | mpi | hier | shm
//   --layout L        hier's nodes, as the test's NODE_RANK makes them: one (a single
//                     node), blocks (node = rank / (world / 2)), alternate (rank % 2)
//   --big             the default round instead: a 64 MiB f32 buffer; also checks that
//                     peak RSS grows by at most the staged bytes plus 8 MiB (gloo, mpi)
// f32 sums use values whose sum depends on its order (3e7 next to 0.5), so they check
// the order each backend documents (gloo, mpi, shm: rank order; hier: rank order
// within each node, then the nodes' sums), not only the values.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "tests/collectives/worker_check.h"
#include "collectives/reduce_kernels.h"
#include "collectives/rounds.h"

using namespace tandem;
using namespace tandem_test;

namespace {


long maxrss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Setup {
  ProcessGroup& g;
  std::string backend, layout;
  int world, rank;
  std::vector<std::vector<int>> nodes;  // hier: the ranks of each node, in rank order
  size_t round;
  size_t expected_peak = 0;  // the most any op below stages, by the backends' headers

  bool node_major() const {
    for (size_t i = 0; i < nodes.size(); ++i)
      for (size_t j = 0; j < nodes[i].size(); ++j)
        if (nodes[i][j] != static_cast<int>(i * nodes[i].size() + j)) return false;
    return true;
  }
};

// Rank r's element i of the whole buffer. Integers (exact in every dtype, sums at most
// 13 x world) except f32, whose large terms make the sum's order visible.
double value(DType d, int r, int64_t i) {
  if (d != DType::f32) return static_cast<double>((r * 7 + i) % 13 + 1);
  static const double base[] = {0.5, 3e7, -3e7, 1.25};
  return base[r % 4] + static_cast<double>(i % 11) * 0.25;
}

// The reduction of every rank's element i in the documented order, rounded as the
// backends round (f32 in float; the integer types exactly; bf16 through float).
double expected_element(const Setup& s, DType d, ReduceOp op, int64_t i) {
  if (op == ReduceOp::min || op == ReduceOp::max) {
    double r = value(d, 0, i);
    for (int q = 1; q < s.world; ++q) r = op == ReduceOp::min ? std::min(r, value(d, q, i)) : std::max(r, value(d, q, i));
    return r;
  }
  if (d != DType::f32) {
    double r = 0;
    for (int q = 0; q < s.world; ++q) r += value(d, q, i);
    return r;
  }
  if (s.backend != "hier") {
    float r = static_cast<float>(value(d, 0, i));
    for (int q = 1; q < s.world; ++q) r += static_cast<float>(value(d, q, i));
    return r;
  }
  float total = 0;
  for (size_t k = 0; k < s.nodes.size(); ++k) {
    float node = static_cast<float>(value(d, s.nodes[k][0], i));
    for (size_t j = 1; j < s.nodes[k].size(); ++j) node += static_cast<float>(value(d, s.nodes[k][j], i));
    total = k == 0 ? node : total + node;
  }
  return total;
}

struct Host {
  std::vector<uint64_t> storage;
  DType d;
  Host(DType dtype, int64_t n) : storage((n * dtype_size(dtype) + 7) / 8 + 1), d(dtype) {}
  void* at(int64_t i) { return reinterpret_cast<char*>(storage.data()) + i * dtype_size(d); }
  Buffer buf(int64_t first, int64_t n) { return Buffer{at(first), n, d, Device::cpu()}; }
  double get(int64_t i) const { return load_element(d, storage.data(), i); }
  void set(int64_t i, double v) { store_element(d, storage.data(), i, v); }
};

void reduce_scatter(Setup& s, DType d, ReduceOp op, int64_t n, bool in_place) {
  const int W = s.world;
  const std::string what = std::string("reduce_scatter ") + dtype_name(d) + " " + reduce_op_str(op) + " " +
                           std::to_string(n) + "/rank" + (in_place ? " in place" : "");
  Host in(d, W * n + 1), out(d, n + 1);
  for (int64_t i = 0; i < W * n; ++i) in.set(i, value(d, s.rank, i));
  in_place ? s.g.reduce_scatter(in.buf(0, W * n), op)->wait()
           : s.g.reduce_scatter(in.buf(0, W * n), out.buf(0, n), op)->wait();
  Host& res = in_place ? in : out;
  const int64_t at = in_place ? s.rank * n : 0;
  // Bitwise: store the expected value in the dtype and compare the stored bits.
  Host want(d, 1);
  int64_t wrong = 0, first_wrong = -1;
  for (int64_t k = 0; k < n; ++k) {
    want.set(0, expected_element(s, d, op, s.rank * n + k));
    if (std::memcmp(res.at(at + k), want.at(0), dtype_size(d)) != 0) {
      if (wrong++ == 0) first_wrong = k;
    }
  }
  CHECK(wrong == 0, "%s: %lld of %lld elements wrong, the first at %lld (%g, expected %g)", what.c_str(),
        (long long)wrong, (long long)n, (long long)first_wrong, first_wrong >= 0 ? res.get(at + first_wrong) : 0.0,
        first_wrong >= 0 ? expected_element(s, d, op, s.rank * n + first_wrong) : 0.0);
  CHECK(res.get(in_place ? W * n : n) == 0, "%s: the guard past the output was written", what.c_str());
  if (!in_place) {
    int64_t changed = 0;
    for (int64_t i = 0; i < W * n; ++i) {
      Host v(d, 1);
      v.set(0, value(d, s.rank, i));
      changed += std::memcmp(in.at(i), v.at(0), dtype_size(d)) != 0;
    }
    CHECK(changed == 0, "%s: %lld input elements changed", what.c_str(), (long long)changed);
  }
  // gloo, mpi: world x one round of every slice; hier: one round out of place.
  const size_t elem = dtype_size(d);
  const size_t round_elems = std::max<size_t>(1, s.round / elem);
  const size_t staged = std::min<size_t>(static_cast<size_t>(n), round_elems) * elem;
  if (s.backend == "gloo" || s.backend == "mpi") s.expected_peak = std::max(s.expected_peak, staged * W);
  if (s.backend == "hier" && !in_place) s.expected_peak = std::max(s.expected_peak, staged);
}

void allgather(Setup& s, DType d, int64_t n, bool in_place) {
  const int W = s.world;
  const std::string what = std::string("allgather ") + dtype_name(d) + " " + std::to_string(n) + "/rank" +
                           (in_place ? " in place" : "");
  Host in(d, n), out(d, W * n + 1);
  // Rank r's element k is value(r, r * n + k): every slice differs from every other.
  for (int64_t k = 0; k < n; ++k) (in_place ? out : in).set(in_place ? s.rank * n + k : k, value(d, s.rank, s.rank * n + k));
  in_place ? s.g.allgather(out.buf(0, W * n))->wait() : s.g.allgather(in.buf(0, n), out.buf(0, W * n))->wait();
  Host want(d, 1);
  int64_t wrong = 0;
  for (int r = 0; r < W; ++r) {
    for (int64_t k = 0; k < n; ++k) {
      want.set(0, value(d, r, r * n + k));
      wrong += std::memcmp(out.at(r * n + k), want.at(0), dtype_size(d)) != 0;
    }
  }
  CHECK(wrong == 0, "%s: %lld of %lld elements wrong", what.c_str(), (long long)wrong, (long long)(W * n));
  CHECK(out.get(W * n) == 0, "%s: the guard past the output was written", what.c_str());
  // hier, nodes interleaving ranks: world x one round of each rank's part.
  if (s.backend == "hier" && !s.node_major())
    s.expected_peak = std::max(s.expected_peak, std::min(static_cast<size_t>(n) * dtype_size(d), s.round) * W);
}

void small_rounds(Setup& s) {
  const DType dtypes[] = {DType::f32, DType::bf16, DType::i64, DType::u8};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::sum, ReduceOp::min, ReduceOp::max};
  for (int t = 0; t < 4; ++t) {
    const DType d = dtypes[t];
    const int64_t r = static_cast<int64_t>(std::max<size_t>(1, s.round / dtype_size(d)));
    for (int64_t n : {int64_t{1}, r - 1, r, 3 * r + 5}) {
      for (bool in_place : {false, true}) {
        reduce_scatter(s, d, ops[t], n, in_place);
        allgather(s, d, n, in_place);
      }
    }
  }
  // f32 sums check the order; integers the values of min and max as well.
  const int64_t r = static_cast<int64_t>(s.round / 4);
  reduce_scatter(s, DType::f32, ReduceOp::max, 2 * r + 1, false);
  reduce_scatter(s, DType::i64, ReduceOp::sum, r / 2 * 5 + 3, true);
}

// 64 MiB of f32 at the default round: peak RSS may grow by the staged bytes and the
// engines' fixed buffers (8 MiB of slack) only, not by the buffer.
void big(Setup& s) {
  const int W = s.world;
  const int64_t n = (int64_t{16} << 20) / W + 3;
  Host in(DType::f32, W * n + 1), out(DType::f32, n + 1);
  for (int64_t i = 0; i < W * n; ++i) in.set(i, value(DType::i32, s.rank, i));
  Host warm(DType::f32, 8);
  s.g.allreduce(warm.buf(0, 8))->wait();  // everyone connected (every buffer is touched already)
  const long before = maxrss_kib();
  s.g.reduce_scatter(in.buf(0, W * n), out.buf(0, n))->wait();
  s.g.reduce_scatter(in.buf(0, W * n))->wait();
  s.g.allgather(in.buf(0, W * n))->wait();
  const long grown = maxrss_kib() - before;
  int64_t wrong = 0;
  for (int64_t k = 0; k < n; ++k) {
    double want = 0;
    for (int q = 0; q < W; ++q) want += value(DType::i32, q, s.rank * n + k);
    wrong += out.get(k) != want;
  }
  CHECK(wrong == 0, "big reduce_scatter: %lld elements wrong", (long long)wrong);
  // The in-place result, gathered: every slice r is rank r's reduced slice.
  wrong = 0;
  for (int64_t i = 0; i < W * n; ++i) {
    double want = 0;
    for (int q = 0; q < W; ++q) want += value(DType::i32, q, i);
    wrong += in.get(i) != want;
  }
  CHECK(wrong == 0, "big reduce_scatter in place + allgather: %lld elements wrong", (long long)wrong);
  const size_t staged = std::min<size_t>(n * 4, s.round);
  if (s.backend == "gloo" || s.backend == "mpi") s.expected_peak = staged * W;
  if (s.backend == "hier") s.expected_peak = s.node_major() ? staged : staged * W;
  std::printf("rank %d: %s, %lld MiB buffer: peak RSS grew %ld KiB, peak_temporary_bytes %zu\n", s.rank,
              s.backend.c_str(), (long long)(W * n * 4 >> 20), grown, s.g.peak_temporary_bytes());
  if (s.backend == "gloo" || s.backend == "mpi") {
    CHECK(static_cast<size_t>(grown) * 1024 <= s.g.peak_temporary_bytes() + (size_t{8} << 20),
          "peak RSS grew %ld KiB during ops on a %lld MiB buffer", grown, (long long)(W * n * 4 >> 20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "gloo", layout = "one";
  bool big_run = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (a == "--layout" && i + 1 < argc) layout = argv[++i];
    else if (a == "--big") big_run = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    InitOptions options;
    options.backend = parse_backend(backend);
    options.timeout = std::chrono::seconds(60);
    auto group = init_process_group(options);
    g_rank = group->rank();
    Setup s{*group, backend, layout, group->size(), group->rank(), {}, round_bytes_from_env()};
    const int W = s.world;
    const int n_nodes = layout == "one" ? 1 : 2;
    s.nodes.resize(n_nodes);
    for (int r = 0; r < W; ++r) s.nodes[layout == "one" ? 0 : layout == "blocks" ? r / (W / 2) : r % 2].push_back(r);
    // hier's op check gathers 32-byte fingerprints the same way as its all-gathers.
    if (backend == "hier" && !s.node_major()) s.expected_peak = std::min<size_t>(32, s.round) * W;
    big_run ? big(s) : small_rounds(s);
    const size_t peak = group->peak_temporary_bytes();
    CHECK(peak == s.expected_peak, "peak_temporary_bytes %zu, expected %zu", peak, s.expected_peak);
    std::printf("rank %d: %s world %d, round %zu bytes: peak_temporary_bytes %zu: %d checks, %d failed\n", g_rank,
                group->backend_name().c_str(), W, s.round, peak, g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
}
