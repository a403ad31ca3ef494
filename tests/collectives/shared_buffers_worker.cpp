// tandem_shared_buffers_worker: one rank of the shm backend's shared-buffer test
// (ProcessGroup::allocate_shared_buffer, collectives/shm/peer_buffers.h). Started by
// tandem_test_spawn -n W. Checks:
//   - every peer's buffer is mapped here (/proc/self/maps) and, once every rank's
//     allocation returned, no object is left in /dev/shm;
//   - in-place all-reduces in the shared buffers (whole, and at an offset, with the
//     elements around untouched) are bit-identical to the same all-reduce of a private
//     copy, which takes the segment's copying algorithm: f32 sum/avg/max, bf16 sum, i64
//     min, sizes from the 64 KiB threshold to ragged ones of several MiB;
//   - ranks that do not all pass their shared buffer (rank 0 a private copy) fall back
//     together and still get the right result;
//   - in-place reduce-scatters and all-gathers in the shared buffers (ZeRO's gradient
//     and parameter buckets) are bit-identical to the copying algorithms', and read
//     exactly one slice of each peer's buffer (its mapping here is resident for the
//     slice's pages, no more); falling back, none;
//   - ranks that ask for different sizes all get no buffer, and the next allocation,
//     asked for alike, works;
//   - a buffer whose owner is released is unmapped.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "tests/collectives/worker_check.h"
#include "collectives/reduce_kernels.h"

using namespace tandem;
using namespace tandem_test;

namespace {


// Mappings of this process whose path contains `part`.
int mappings_with(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(part) != std::string::npos;
  return n;
}

// The object a mapping of this process whose path contains `part` maps, without the
// " (deleted)" the kernel appends once it is unlinked; "" if none.
std::string mapped_path(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find("/dev/shm/");
    if (at == std::string::npos || line.find(part) == std::string::npos) continue;
    std::string path = line.substr(at);
    const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
      path.resize(path.size() - deleted.size());
    return path;
  }
  return "";
}

// Rank r's element i: values whose f32 sum depends on the order of the terms.
double value(DType d, int r, int64_t i) {
  if (d == DType::f32) {
    static const double base[] = {0.1, 3e7, -3e7, 1.3};
    return base[r % 4] + static_cast<double>(i % 101) * 0.37;
  }
  return static_cast<double>((r * 5 + i) % 17) - 8;
}

// Fills `n` elements at `data` with rank `rank`'s values, starting at element `first`.
void fill(DType d, void* data, int rank, int64_t first, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_element(d, data, i, value(d, rank, first + i));
}

struct Case {
  DType dtype;
  ReduceOp op;
  int64_t count;
};

void compare_with_private(ProcessGroup& g, const Case& t, bool rank0_private) {
  const size_t esize = dtype_size(t.dtype);
  const size_t bytes = static_cast<size_t>(t.count) * esize;
  ProcessGroup::SharedBuffer shared = g.allocate_shared_buffer(bytes);
  CHECK(shared.data != nullptr, "no shared buffer of %zu bytes", bytes);
  if (!shared.data) return;
  std::vector<uint8_t> priv(bytes), mine(bytes);
  fill(t.dtype, shared.data, g.rank(), 0, t.count);
  fill(t.dtype, priv.data(), g.rank(), 0, t.count);
  fill(t.dtype, mine.data(), g.rank(), 0, t.count);
  // The shared buffer's all-reduce (rank 0 passing a private copy instead, when asked).
  void* first = rank0_private && g.rank() == 0 ? mine.data() : shared.data;
  g.allreduce(Buffer{first, t.count, t.dtype, Device::cpu()}, t.op)->wait();
  g.allreduce(Buffer{priv.data(), t.count, t.dtype, Device::cpu()}, t.op)->wait();
  CHECK(std::memcmp(first, priv.data(), bytes) == 0, "%s %s of %lld elements%s: differs from the copying algorithm's",
        dtype_name(t.dtype), reduce_op_str(t.op), static_cast<long long>(t.count),
        rank0_private ? " (rank 0 private)" : "");
}

// Resident bytes of this process's mapping of rank r's buffer in the newest allocation
// that has one (its path ends in -b<allocation>-r<r>).
int64_t resident_of_newest(int r) {
  std::ifstream smaps("/proc/self/smaps");
  const std::regex name("-b([0-9]+)-r" + std::to_string(r) + " \\(deleted\\)$");
  int newest = -1;
  int64_t rss = 0;
  bool in_it = false;
  for (std::string line; std::getline(smaps, line);) {
    std::smatch m;
    if (line.find("/dev/shm/") != std::string::npos) {
      in_it = std::regex_search(line, m, name) && std::stoi(m[1]) > newest;
      if (in_it) newest = std::stoi(m[1]);
    } else if (in_it && line.rfind("Rss:", 0) == 0) {
      rss = std::stoll(line.substr(4)) * 1024;  // "Rss:  123 kB"
      in_it = false;
    }
  }
  return rss;
}

// An in-place reduce-scatter (gather = false) or all-gather of the shared buffer against
// the same op on a private copy.
void sliced_vs_private(ProcessGroup& g, bool gather, const Case& t, bool rank0_private) {
  const int w = g.size();
  const int64_t count = t.count / w * w, slice = count / w;
  const size_t esize = dtype_size(t.dtype), bytes = static_cast<size_t>(count) * esize;
  ProcessGroup::SharedBuffer shared = g.allocate_shared_buffer(bytes);
  CHECK(shared.data != nullptr, "no shared buffer of %zu bytes", bytes);
  if (!shared.data) return;
  std::vector<uint8_t> priv(bytes), mine(bytes);
  fill(t.dtype, shared.data, g.rank(), 0, count);
  fill(t.dtype, priv.data(), g.rank(), 0, count);
  fill(t.dtype, mine.data(), g.rank(), 0, count);
  void* first = rank0_private && g.rank() == 0 ? mine.data() : shared.data;
  const auto run = [&](void* data) {
    const Buffer whole{data, count, t.dtype, Device::cpu()};
    (gather ? g.allgather(whole) : g.reduce_scatter(whole, t.op))->wait();
  };
  run(first);
  run(priv.data());
  const char* what = gather ? "all-gather" : "reduce-scatter";
  const char* how = rank0_private ? " (rank 0 private)" : "";
  CHECK(std::memcmp(first, priv.data(), bytes) == 0, "%s %s %s of %lld elements%s: differs from the copying algorithm's",
        what, dtype_name(t.dtype), reduce_op_str(t.op), static_cast<long long>(count), how);
  // Every rank is past both ops: the shared one read one slice of each peer's buffer,
  // whole pages of it at least, and no more than the kernel's fault-around (a read fault
  // on a shared file mapping maps up to 64 KiB of neighbouring cached pages) at either
  // end; the fallback none.
  g.barrier()->wait();
  const int64_t slice_bytes = slice * static_cast<int64_t>(esize), page = 4096, around = 64 << 10;
  for (int r = 0; r < w; ++r) {
    if (r == g.rank()) continue;
    const int64_t rss = resident_of_newest(r);
    if (rank0_private) {
      CHECK(rss == 0, "fallback %s: rank %d's buffer has %lld resident bytes here", what, r,
            static_cast<long long>(rss));
    } else {
      CHECK(rss >= slice_bytes / page * page - page && rss <= slice_bytes + 2 * (around + page),
            "%s of %lld bytes per slice: rank %d's buffer has %lld resident bytes here", what,
            static_cast<long long>(slice_bytes), r, static_cast<long long>(rss));
    }
  }
}

void at_offset(ProcessGroup& g) {
  // A 600,000-element f32 buffer; the all-reduce covers [1000, 501000).
  const int64_t n = 600000, off = 1000, m = 500000;
  ProcessGroup::SharedBuffer shared = g.allocate_shared_buffer(static_cast<size_t>(n) * 4);
  CHECK(shared.data != nullptr, "no shared buffer");
  if (!shared.data) return;
  auto* f = static_cast<float*>(shared.data);
  fill(DType::f32, f, g.rank(), 0, n);
  std::vector<float> priv(f + off, f + off + m);
  g.allreduce(Buffer{f + off, m, DType::f32, Device::cpu()}, ReduceOp::sum)->wait();
  g.allreduce(Buffer{priv.data(), m, DType::f32, Device::cpu()}, ReduceOp::sum)->wait();
  CHECK(std::memcmp(f + off, priv.data(), m * 4) == 0, "all-reduce at an offset differs from the copying algorithm's");
  int64_t touched = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i >= off && i < off + m) continue;
    touched += f[i] != static_cast<float>(value(DType::f32, g.rank(), i));
  }
  CHECK(touched == 0, "%lld elements outside the all-reduced range changed", static_cast<long long>(touched));
}

}  // namespace

int main() {
  try {
    InitOptions options;
    options.backend = parse_backend("shm");
    options.timeout = std::chrono::seconds(60);
    auto group = init_process_group(options);
    ProcessGroup& g = *group;
    g_rank = g.rank();
    const int W = g.size();

    // Mapped everywhere, unlinked. Allocation 0 of this group.
    {
      ProcessGroup::SharedBuffer b = g.allocate_shared_buffer(1 << 20);
      CHECK(b.data != nullptr, "no shared buffer of 1 MiB");
      g.barrier()->wait();  // every rank has unlinked its own object
      for (int r = 0; r < W; ++r) {
        const std::string part = "-b0-r" + std::to_string(r) + " (deleted)";
        CHECK(mappings_with(part) == 1, "rank %d's buffer is mapped %d times here", r, mappings_with(part));
        const std::string path = mapped_path("-b0-r" + std::to_string(r));
        CHECK(!path.empty() && access(path.c_str(), F_OK) != 0, "rank %d's object %s is still in /dev/shm", r,
              path.c_str());
      }
      b = {};
      CHECK(mappings_with("-b0-r") == 0, "allocation 0 is still mapped after its owner was released");
    }
    // Too small to be worth it: none offered.
    CHECK(g.allocate_shared_buffer(1024).data == nullptr, "a 1 KiB shared buffer was offered");

    const Case cases[] = {
        {DType::f32, ReduceOp::sum, 16384},    // 64 KiB: the smallest that takes the shared path
        {DType::f32, ReduceOp::avg, 1000003},  // ragged shares
        {DType::f32, ReduceOp::max, 65537},
        {DType::bf16, ReduceOp::sum, 300001},
        {DType::i64, ReduceOp::min, 123457},
    };
    for (const Case& t : cases) compare_with_private(g, t, false);
    compare_with_private(g, {DType::f32, ReduceOp::sum, 250007}, true);
    at_offset(g);
    const Case scatter_cases[] = {
        {DType::f32, ReduceOp::avg, 1 << 20},  // ZeRO's: f32 averaged
        {DType::f32, ReduceOp::sum, 16392},    // just past 64 KiB, the threshold, at 2-4 ranks
        {DType::bf16, ReduceOp::sum, 300000},
        {DType::i64, ReduceOp::max, 123456},
    };
    for (bool gather : {false, true}) {
      for (const Case& t : scatter_cases) sliced_vs_private(g, gather, t, false);
      sliced_vs_private(g, gather, {DType::f32, ReduceOp::sum, 1 << 20}, true);
    }

    // Different sizes: nobody gets one; the next, asked alike, works.
    ProcessGroup::SharedBuffer odd = g.allocate_shared_buffer(g.rank() == 0 ? (1 << 20) : (2 << 20));
    CHECK(odd.data == nullptr, "ranks asking for different sizes got a shared buffer");
    ProcessGroup::SharedBuffer after = g.allocate_shared_buffer(1 << 20);
    CHECK(after.data != nullptr, "no shared buffer after a refused allocation");

    std::printf("rank %d: shm world %d, shared buffers: %d checks, %d failed\n", g_rank, W, g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
}
