// ProcessGroupShm: each op is cut into rounds of the group's segment on the
// communication thread (see process_group_shm.h and shm_segment.h).
#include "collectives/shm/process_group_shm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/op_check.h"
#include "collectives/reduce_kernels.h"
#include "collectives/shm/peer_buffers.h"
#include "collectives/shm/shm_segment.h"

namespace tandem {

const bool kShmBuilt = true;

namespace {

// Bytes per slot (each rank has two): big enough that large ops pipeline in few rounds,
// small enough to stay in cache. TANDEM_SHM_SLOT_KB overrides it (tuning).
size_t slot_bytes_from_env() {
  size_t kb = 512;
  if (const char* v = std::getenv("TANDEM_SHM_SLOT_KB"); v && *v) {
    const long n = std::atol(v);
    if (n >= 4 && n <= (1 << 20)) kb = static_cast<size_t>(n);
  }
  return kb * 1024;
}

// From this world size on, large all-reduces split the reduction (measured on 2 ranks:
// see collectives/README.md).
constexpr int kSplitMinRanks = 3;

// Starts op c's rounds: their deadline, and, with the op check on, its fingerprint in
// the first round (ShmSegment::check_next_round: no round of its own).
void start_op(ShmSegment& seg, std::chrono::milliseconds timeout, const Collective& c, bool check) {
  seg.set_deadline(std::chrono::steady_clock::now() + timeout);
  if (!check) return;
  static_assert(sizeof(OpFingerprint) == ShmSegment::kFingerprintBytes);
  const OpFingerprint mine = fingerprint_of(c);
  // By reference: the next round runs inside this same task, while c (the task's own
  // copy) lives, and two pointers fit std::function's inline storage (no allocation
  // per op on the small-op path).
  seg.check_next_round(&mine, [&seg, &c] {
    std::vector<OpFingerprint> all(static_cast<size_t>(seg.size()));
    for (int r = 0; r < seg.size(); ++r) std::memcpy(&all[r], seg.fingerprint(r), sizeof(OpFingerprint));
    if (std::string error = disagreement(c, all); !error.empty()) throw CollectiveError(error);
  });
}

// out = slot(0) op slot(1) op ... in rank order, `count` elements at byte `at` of each slot.
void reduce_slots(ShmSegment& seg, DType d, ReduceOp op, void* out, size_t at, int64_t count) {
  const int n = seg.size();
  if (n == 1) {
    std::memcpy(out, seg.slot(0) + at, static_cast<size_t>(count) * dtype_size(d));
  } else {
    reduce_elements(d, engine_op(op), out, seg.slot(0) + at, seg.slot(1) + at, count);
    for (int r = 2; r < n; ++r) reduce_elements(d, engine_op(op), out, out, seg.slot(r) + at, count);
  }
  if (op == ReduceOp::avg) divide_elements(d, out, count, n);
}

void shm_allreduce(ShmSegment& seg, const Collective& c) {
  const DType d = c.dtype();
  const size_t esize = dtype_size(d);
  const int64_t per_round = static_cast<int64_t>(seg.slot_bytes() / esize);
  const auto* in = static_cast<const uint8_t*>(c.in.data);
  auto* out = static_cast<uint8_t*>(c.out.data);
  for (int64_t first = 0; first < c.out.count; first += per_round) {
    const int64_t n = std::min(per_round, c.out.count - first);
    const size_t off = static_cast<size_t>(first) * esize, len = static_cast<size_t>(n) * esize;
    seg.round([&](uint8_t* mine) { std::memcpy(mine, in + off, len); },
              [&] { reduce_slots(seg, d, c.reduce, out + off, 0, n); });
  }
}

// The large all-reduce as reduce-scatter + all-gather through the segment, pipelined:
// round j copies chunk j in and reduces this rank's 1/W share of it (all ranks' slots,
// rank order) into its result area, and copies every rank's reduced share of chunk j-1
// out; one more round copies the last chunk out. Each rank reduces 1/W of the bytes
// instead of all of them, for one more copy of the result through the segment.
void shm_allreduce_split(ShmSegment& seg, const Collective& c) {
  const DType d = c.dtype();
  const size_t esize = dtype_size(d);
  const int w = seg.size();
  const int64_t per_round = static_cast<int64_t>(seg.slot_bytes() / esize);
  const int64_t chunks = (c.out.count + per_round - 1) / per_round;
  const auto* in = static_cast<const uint8_t*>(c.in.data);
  auto* out = static_cast<uint8_t*>(c.out.data);
  const auto chunk_count = [&](int64_t j) { return std::min(per_round, c.out.count - j * per_round); };
  // Rank q's share of an n-element chunk: [first, first + count).
  const auto share = [&](int64_t n, int q, int64_t& first, int64_t& count) {
    const int64_t each = (n + w - 1) / w;
    first = std::min(n, q * each);
    count = std::min(n, first + each) - first;
  };
  for (int64_t j = 0; j <= chunks; ++j) {
    seg.round(
        [&](uint8_t* mine) {
          if (j < chunks) std::memcpy(mine, in + j * per_round * esize, static_cast<size_t>(chunk_count(j)) * esize);
        },
        [&] {
          if (j > 0) {
            uint8_t* base = out + (j - 1) * per_round * esize;
            for (int q = 0; q < w; ++q) {
              int64_t first, count;
              share(chunk_count(j - 1), q, first, count);
              std::memcpy(base + first * esize, seg.previous_result(q), static_cast<size_t>(count) * esize);
            }
          }
          if (j < chunks) {
            int64_t first, count;
            share(chunk_count(j), seg.rank(), first, count);
            reduce_slots(seg, d, c.reduce, seg.result(), static_cast<size_t>(first) * esize, count);
          }
        });
  }
}

// What a rank passes to an in-place all-reduce, reduce-scatter or all-gather of at least
// kInBuffersMinBytes, in the first round of it: the shared buffer (allocation id) and
// offset its whole buffer lies at, or id -1.
struct BufferClaim {
  int64_t id;
  uint64_t offset;
  uint64_t bytes;
};

// The whole buffer an in-place op works on: the all-reduce's, the reduce-scatter's
// input, the all-gather's output.
const Buffer& whole_buffer(const Collective& c) { return c.op == OpType::allgather ? c.out : c.in; }

// Rank r's share of an op in shared buffers, in elements of the whole buffer: a
// reduce-scatter's or all-gather's slice; an all-reduce's 1/W, cut at multiples of 64
// bytes so that no two ranks write one cache line.
void share_of(const Collective& c, int w, int r, int64_t& first, int64_t& count) {
  if (c.op == OpType::allreduce) {
    const int64_t n = c.in.count, align = static_cast<int64_t>(64 / dtype_size(c.dtype()));
    const int64_t each = ((n + w - 1) / w + align - 1) / align * align;
    first = std::min(n, r * each);
    count = std::min(n, first + each) - first;
  } else {
    count = c.op == OpType::reduce_scatter ? c.out.count : c.in.count;
    first = r * count;
  }
}

// Where element `element` of rank r's shared buffer lies in this process.
using SharedAt = std::function<uint8_t*(int r, int64_t element)>;

// This rank's share of its own buffer = every rank's share, reduced in rank order.
void reduce_share(const Collective& c, int w, int q, const SharedAt& at) {
  const DType d = c.dtype();
  const size_t esize = dtype_size(d);
  const ReduceOp op = engine_op(c.reduce);
  int64_t first, count;
  share_of(c, w, q, first, count);
  // In cache-sized pieces; rank 0 and 1 sum into their own buffer (element i of both
  // inputs is read before it is written), the others through a piece of scratch, as
  // their own input joins the sum only at position q.
  const int64_t piece = static_cast<int64_t>((size_t{64} << 10) / esize);
  std::vector<uint8_t> scratch(q >= 2 ? static_cast<size_t>(std::min(piece, count)) * esize : 0);
  for (int64_t e = first; e < first + count; e += piece) {
    const int64_t n = std::min(piece, first + count - e);
    uint8_t* out = at(q, e);
    uint8_t* acc = q >= 2 ? scratch.data() : out;
    reduce_elements(d, op, acc, at(0, e), at(1, e), n);
    for (int r = 2; r < w; ++r) reduce_elements(d, op, acc, acc, at(r, e), n);
    if (acc != out) std::memcpy(out, acc, static_cast<size_t>(n) * esize);
    if (c.reduce == ReduceOp::avg) divide_elements(d, out, n, w);
  }
}

// An in-place all-reduce, reduce-scatter or all-gather in the ranks' shared buffers
// (process_group_shm.h), no copy in. Round 1 agrees on the buffers and does the op's
// first part: the reductions reduce this rank's share of every rank's buffer, in rank
// order, into its own (a reduce-scatter's share is its slice, where its output lies);
// the all-gather, whose inputs are final once every rank has entered the op, copies
// every other rank's slice from its owner's buffer. The all-reduce's round 2 copies the
// other shares from their owners' buffers. The last round closes: no rank writes its
// buffer again while a peer may still read from it. Returns false after round 1 when the
// ranks did not all pass the same shared buffer and offset: they then all run the
// segment's algorithm instead.
bool shm_in_buffers(ShmSegment& seg, const Collective& c, const PeerBuffers::Region* region, size_t offset) {
  const BufferClaim mine{region ? region->id : -1, offset, whole_buffer(c).bytes()};
  const int w = seg.size(), q = seg.rank();
  const size_t esize = dtype_size(c.dtype());
  const SharedAt at = [&](int r, int64_t element) {
    return region->base[r] + offset + static_cast<size_t>(element) * esize;
  };
  const auto copy_other_shares = [&] {
    for (int r = 0; r < w; ++r) {
      if (r == q) continue;
      int64_t first, count;
      share_of(c, w, r, first, count);
      std::memcpy(at(q, first), at(r, first), static_cast<size_t>(count) * esize);
    }
  };
  bool agreed = mine.id >= 0;
  seg.round([&](uint8_t* slot) { std::memcpy(slot, &mine, sizeof mine); },
            [&] {
              for (int r = 0; r < w; ++r) {
                BufferClaim other;
                std::memcpy(&other, seg.slot(r), sizeof other);
                agreed = agreed && other.id == mine.id && other.offset == mine.offset && other.bytes == mine.bytes;
              }
              if (!agreed) return;
              if (c.op == OpType::allgather) {
                copy_other_shares();
              } else {
                reduce_share(c, w, q, at);
              }
            });
  if (!agreed) return false;
  if (c.op == OpType::allreduce) seg.round([](uint8_t*) {}, copy_other_shares);
  seg.round([](uint8_t*) {}, [] {});
  return true;
}

// The world size from which all-reduces that span several rounds split the reduction:
// kSplitMinRanks, or TANDEM_SHM_ALLREDUCE=direct|split (tuning; every rank of a job must
// see the same value, as they see the same environment).
int split_min_ranks_from_env() {
  if (const char* v = std::getenv("TANDEM_SHM_ALLREDUCE"); v && *v) {
    if (std::string(v) == "split") return 1;
    if (std::string(v) == "direct") return 1 << 30;
  }
  return kSplitMinRanks;
}

// TANDEM_SHM_BUFFERS=0: offer no shared buffers (every all-reduce copies through the
// segment), to compare; 1 or unset: offer them. Anything else is an error.
bool shared_buffers_from_env() {
  const char* v = std::getenv("TANDEM_SHM_BUFFERS");
  if (!v || !*v || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  throw CollectiveError(std::string("TANDEM_SHM_BUFFERS must be 0 or 1, not '") + v + "'");
}

void shm_broadcast(ShmSegment& seg, const Collective& c) {
  const bool root = seg.rank() == c.root;
  const size_t total = c.out.bytes();
  const auto* in = static_cast<const uint8_t*>(c.in.data);
  auto* out = static_cast<uint8_t*>(c.out.data);
  for (size_t off = 0; off < total; off += seg.slot_bytes()) {
    const size_t len = std::min(seg.slot_bytes(), total - off);
    seg.round([&](uint8_t* mine) { if (root) std::memcpy(mine, in + off, len); },
              [&] { if (!(root && c.in_place)) std::memcpy(out + off, seg.slot(c.root), len); });
  }
}

void shm_allgather(ShmSegment& seg, const Collective& c) {
  const size_t each = c.in.bytes();
  const auto* in = static_cast<const uint8_t*>(c.in.data);
  auto* out = static_cast<uint8_t*>(c.out.data);
  for (size_t off = 0; off < each; off += seg.slot_bytes()) {
    const size_t len = std::min(seg.slot_bytes(), each - off);
    seg.round([&](uint8_t* mine) { std::memcpy(mine, in + off, len); },
              [&] {
                for (int r = 0; r < seg.size(); ++r) {
                  if (c.in_place && r == seg.rank()) continue;  // already in place
                  std::memcpy(out + r * each + off, seg.slot(r), len);
                }
              });
  }
}

void shm_reduce_scatter(ShmSegment& seg, const Collective& c) {
  const DType d = c.dtype();
  const size_t esize = dtype_size(d);
  const int n_ranks = seg.size();
  // Each round carries, per destination rank, a piece of `per_round` elements.
  const int64_t per_round = std::max<int64_t>(1, static_cast<int64_t>(seg.slot_bytes() / esize / n_ranks));
  const size_t slice = c.out.bytes();
  const auto* in = static_cast<const uint8_t*>(c.in.data);
  auto* out = static_cast<uint8_t*>(c.out.data);
  for (int64_t first = 0; first < c.out.count; first += per_round) {
    const int64_t n = std::min(per_round, c.out.count - first);
    const size_t off = static_cast<size_t>(first) * esize, len = static_cast<size_t>(n) * esize;
    seg.round(
        [&](uint8_t* mine) {
          for (int q = 0; q < n_ranks; ++q) std::memcpy(mine + q * len, in + q * slice + off, len);
        },
        // In place, out is this rank's slice of in: its piece at `off` was copied in above.
        [&] { reduce_slots(seg, d, c.reduce, out + off, static_cast<size_t>(seg.rank()) * len, n); });
  }
}

}  // namespace

ProcessGroupShm::ProcessGroupShm(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"shm", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}),
      split_min_ranks_(split_min_ranks_from_env()),
      shared_buffers_(shared_buffers_from_env()) {
  if (!args.store) throw CollectiveError("the shm backend needs a store to share its segment's name");
  ShmSegment::Options o;
  o.rank = args.rank;
  o.size = args.size;
  o.job_id = args.job_id;
  o.group_name = args.group_name;
  o.slot_bytes = std::max(slot_bytes_from_env(), sizeof(OpFingerprint) * static_cast<size_t>(args.size));
  o.timeout = args.timeout;
  try {
    segment_ = std::make_shared<ShmSegment>(o, *args.store);
  } catch (const std::exception& e) {
    throw CollectiveError("shm: rank " + std::to_string(args.rank) + " could not set up the shared segment of " +
                          std::to_string(args.size) + " ranks: " + e.what());
  }
  // With the backend line of init_process_group, the log's first lines say which
  // algorithm each op size takes, and why (the world size, or the tuning variable).
  if (args.rank == 0)
    spdlog::info("collectives: shm algorithms: an op of up to {} KiB takes one round (no closing barrier); "
                 "larger all-reduces pipeline {} KiB chunks, {} ({})",
                 o.slot_bytes / 1024, o.slot_bytes / 1024,
                 args.size >= split_min_ranks_ ? "reduce-scatter + all-gather" : "every rank reducing every chunk",
                 std::getenv("TANDEM_SHM_ALLREDUCE") ? "TANDEM_SHM_ALLREDUCE"
                                                     : std::to_string(args.size) + " ranks, split from " +
                                                           std::to_string(kSplitMinRanks));
  peers_ = std::make_shared<PeerBuffers>(args.rank, args.size, segment_->name());
  check_ = args.check_ops;
  if (check_) {
    // A zero-byte op moves nothing, but its ranks still compare fingerprints: one round.
    check_ops_in_engine([seg = segment_, timeout = timeout()](const Collective& c) {
      start_op(*seg, timeout, c, true);
      seg->round([](uint8_t*) {}, [] {});
    });
  }
}

ProcessGroupShm::~ProcessGroupShm() { stop_comm_thread(); }

ProcessGroup::SharedBuffer ProcessGroupShm::allocate_shared_buffer(size_t bytes) {
  if (!shared_buffers_ || size() == 1 || bytes < kInBuffersMinBytes) return {};
  std::string why;
  auto region = peers_->allocate(bytes, *store()->clone(timeout()), timeout(), why);
  if (!region) {
    if (rank() == 0)
      spdlog::warn("shm: no shared buffer of {} bytes ({}); its all-reduces copy through the segment", bytes, why);
    return {};
  }
  return {region->base[static_cast<size_t>(rank())], region};
}

std::shared_ptr<Work> ProcessGroupShm::run_allreduce(const Collective& c) {
  // Whether to try the shared buffers depends on the size only, the same on every rank
  // (the op check holds them to it), so every rank runs the same rounds.
  const bool claim = size() > 1 && c.in.bytes() >= kInBuffersMinBytes;
  std::shared_ptr<PeerBuffers::Region> region;
  size_t offset = 0;
  if (claim && c.in_place) region = peers_->find(c.in.data, c.in.bytes(), offset);
  return submit(c, [seg = segment_, c, timeout = timeout(), split_from = split_min_ranks_, claim, region, offset, check = check_] {
    start_op(*seg, timeout, c, check);
    if (claim && shm_in_buffers(*seg, c, region.get(), offset)) return;
    if (seg->size() >= split_from && c.out.bytes() > seg->slot_bytes()) {
      shm_allreduce_split(*seg, c);
    } else {
      shm_allreduce(*seg, c);
    }
  });
}

std::shared_ptr<Work> ProcessGroupShm::run_broadcast(const Collective& c) {
  return submit(c, [seg = segment_, c, timeout = timeout(), check = check_] {
    start_op(*seg, timeout, c, check);
    shm_broadcast(*seg, c);
  });
}

std::shared_ptr<Work> ProcessGroupShm::run_allgather(const Collective& c) {
  // As run_allreduce: ZeRO's parameter buckets are gathered in place in shared buffers.
  const bool claim = size() > 1 && c.out.bytes() >= kInBuffersMinBytes;
  std::shared_ptr<PeerBuffers::Region> region;
  size_t offset = 0;
  if (claim && c.in_place) region = peers_->find(c.out.data, c.out.bytes(), offset);
  return submit(c, [seg = segment_, c, timeout = timeout(), claim, region, offset, check = check_] {
    start_op(*seg, timeout, c, check);
    if (claim && shm_in_buffers(*seg, c, region.get(), offset)) return;
    shm_allgather(*seg, c);
  });
}

std::shared_ptr<Work> ProcessGroupShm::run_reduce_scatter(const Collective& c) {
  // As run_allreduce: ZeRO's buckets are reduce-scattered in place in shared buffers.
  const bool claim = size() > 1 && c.in.bytes() >= kInBuffersMinBytes;
  std::shared_ptr<PeerBuffers::Region> region;
  size_t offset = 0;
  if (claim && c.in_place) region = peers_->find(c.in.data, c.in.bytes(), offset);
  return submit(c, [seg = segment_, c, timeout = timeout(), claim, region, offset, check = check_] {
    start_op(*seg, timeout, c, check);
    if (claim && shm_in_buffers(*seg, c, region.get(), offset)) return;
    shm_reduce_scatter(*seg, c);
  });
}

std::shared_ptr<Work> ProcessGroupShm::run_barrier(const Collective& c) {
  return submit(c, [seg = segment_, c, timeout = timeout(), check = check_] {
    start_op(*seg, timeout, c, check);
    seg->round([](uint8_t*) {}, [] {});
  });
}

std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args) {
  return std::make_shared<ProcessGroupShm>(args);
}

}  // namespace tandem
