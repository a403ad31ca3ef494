// The cross-rank op check (see op_check.h).
#include "collectives/op_check.h"

#include <sstream>

namespace tandem {

namespace {

bool same_op(const OpFingerprint& a, const OpFingerprint& b) {
  return a.seq == b.seq && a.in_count == b.in_count && a.out_count == b.out_count && a.root == b.root &&
         a.op == b.op && a.dtype == b.dtype && a.reduce == b.reduce;
}

// "rank 3", "ranks 0-1", "ranks 0, 2, 5-7": every run of neighbours as a range (the rank
// health's rank_list writes a pair as "0, 1"; the op check's messages keep their form).
std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

// A peer's bytes name an enum value this build may not know (a corrupt or foreign
// message): print the number rather than index past the names.
std::string dtype_text(uint8_t d) {
  return d <= static_cast<uint8_t>(DType::u8) ? dtype_name(static_cast<DType>(d)) : "dtype " + std::to_string(d);
}
std::string reduce_text(uint8_t r) {
  return r <= static_cast<uint8_t>(ReduceOp::max) ? reduce_op_str(static_cast<ReduceOp>(r))
                                                  : "reduce op " + std::to_string(r);
}

}  // namespace

OpFingerprint fingerprint_of(const Collective& c) {
  OpFingerprint f;
  f.seq = c.seq;
  f.op = static_cast<uint8_t>(c.op);
  if (c.op == OpType::barrier) return f;  // no buffers: their dtype and counts mean nothing
  f.in_count = c.in.count;
  f.out_count = c.out.count;
  f.dtype = static_cast<uint8_t>(c.dtype());
  if (c.op == OpType::allreduce || c.op == OpType::reduce_scatter) f.reduce = static_cast<uint8_t>(c.reduce);
  if (c.op == OpType::broadcast) f.root = c.root;
  return f;
}

std::string describe_fingerprint(const OpFingerprint& f, uint64_t expected_seq) {
  std::ostringstream s;
  const auto op = static_cast<OpType>(f.op);
  switch (op) {
    case OpType::allreduce:
      s << "allreduce " << dtype_text(f.dtype) << ' ' << reduce_text(f.reduce) << ' ' << f.out_count << " elements";
      break;
    case OpType::broadcast:
      s << "broadcast " << dtype_text(f.dtype) << ' ' << f.out_count << " elements from root " << f.root;
      break;
    case OpType::allgather:
      s << "allgather " << dtype_text(f.dtype) << ' ' << f.in_count << " elements per rank";
      break;
    case OpType::reduce_scatter:
      s << "reduce_scatter " << dtype_text(f.dtype) << ' ' << reduce_text(f.reduce) << ' ' << f.out_count
        << " elements per rank";
      break;
    case OpType::barrier: s << "barrier"; break;
    default: s << "op kind " << static_cast<int>(f.op); break;
  }
  if (f.seq != expected_seq) s << " as #" << f.seq;
  return s.str();
}

std::string disagreement(const Collective& c, const std::vector<OpFingerprint>& all) {
  bool agree = true;
  for (const OpFingerprint& f : all) agree = agree && same_op(f, all.front());
  if (agree) return "";
  // Group ranks by what they passed, in order of each group's lowest rank; cap the
  // groups so a large world whose ranks all differ still gives a readable line.
  constexpr size_t kMaxGroups = 8;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    bool placed = false;
    for (auto& g : groups) {
      if (same_op(all[g.front()], all[r])) {
        g.push_back(r);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({r});
  }
  std::string out = c.describe() + ": ranks disagree: ";
  for (size_t k = 0; k < groups.size() && k < kMaxGroups; ++k) {
    if (k > 0) out += "; ";
    out += ranks_phrase(groups[k]);
    out += ": ";
    out += describe_fingerprint(all[groups[k].front()], c.seq);
  }
  if (groups.size() > kMaxGroups) out += "; and " + std::to_string(groups.size() - kMaxGroups) + " more variants";
  return out;
}

void require_ranks_agree(const Collective& c, int size, const FingerprintGather& gather) {
  const OpFingerprint mine = fingerprint_of(c);
  std::vector<OpFingerprint> all(static_cast<size_t>(size));
  gather(mine, all.data(), c.seq);
  if (std::string error = disagreement(c, all); !error.empty()) throw CollectiveError(error);
}

}  // namespace tandem
