// ProcessGroupHier: finds the nodes through the store, builds the node (shm) and
// leaders (gloo) groups, and runs each op as a sequence of their ops on the
// communication thread (see process_group_hier.h).
#include "collectives/hier/process_group_hier.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "collectives/reduce_kernels.h"
#include "collectives/rounds.h"

namespace tandem {

// What every task holds by value: the sub-groups and where each rank sits.
struct HierState {
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{};
  std::vector<std::vector<int>> nodes;  // nodes[i][j]: global rank of node i's j-th rank
  int node = 0;                         // this rank's node
  int local_rank = 0;                   // its index within nodes[node]
  std::shared_ptr<ProcessGroup> node_group;     // shm, nodes[node]
  std::shared_ptr<ProcessGroup> leaders_group;  // gloo, one per node; null on non-leaders and single nodes
  size_t round_bytes = kRoundBytes;             // of each slice, per staged round
  PeakBytes peak_temporary;                     // written by the comm thread only

  int n_nodes() const { return static_cast<int>(nodes.size()); }
  int local_size() const { return static_cast<int>(nodes[node].size()); }
  bool multi_node() const { return n_nodes() > 1; }
  void await(const std::shared_ptr<Work>& w) const { w->wait(timeout); }
  // Nodes hold consecutive global ranks, in node order (tandemrun's layout): then the
  // leaders' node-major order is global rank order.
  bool node_major() const {
    for (int i = 0; i < n_nodes(); ++i)
      for (int j = 0; j < local_size(); ++j)
        if (nodes[i][j] != i * local_size() + j) return false;
    return true;
  }
};

namespace {

// Host name, boot id and the launcher's node rank: equal on ranks of one node, different
// across machines and across the network-namespace "nodes" of one machine (which share
// a host name and boot id, but not NODE_RANK).
std::string node_identity(int node_rank) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "|" + boot + "|" + std::to_string(node_rank);
}

Buffer bytes_buffer(void* data, size_t bytes) { return Buffer{data, static_cast<int64_t>(bytes), DType::u8, Device::cpu()}; }

Buffer typed(void* data, int64_t count, DType d) { return Buffer{data, count, d, Device::cpu()}; }

// Sum (avg) or min/max of `in` into `out` over the world; out may be in (in place).
void hier_allreduce(const HierState& s, const Buffer& in, const Buffer& out, bool in_place, ReduceOp op) {
  const ReduceOp stage = op == ReduceOp::avg ? ReduceOp::sum : op;
  s.await(in_place ? s.node_group->allreduce(out, stage) : s.node_group->allreduce(in, out, stage));
  if (s.multi_node()) {
    if (s.leaders_group) s.await(s.leaders_group->allreduce(out, stage));
    s.await(s.node_group->broadcast(out, 0));
  }
  if (op == ReduceOp::avg) divide_elements(out.dtype, out.data, out.count, s.world);
}

// out (on every rank) = root's buffer; the root's data is already in its `out`.
void hier_broadcast(const HierState& s, const Buffer& out, int root) {
  int root_node = 0, root_local = 0;
  for (int i = 0; i < s.n_nodes(); ++i) {
    for (int j = 0; j < static_cast<int>(s.nodes[i].size()); ++j) {
      if (s.nodes[i][j] == root) root_node = i, root_local = j;
    }
  }
  if (!s.multi_node()) {
    s.await(s.node_group->broadcast(out, root_local));
    return;
  }
  if (s.node == root_node && root_local != 0) s.await(s.node_group->broadcast(out, root_local));
  if (s.leaders_group) s.await(s.leaders_group->broadcast(out, root_node));
  s.await(s.node_group->broadcast(out, 0));
}

// out (world * each bytes, global rank order) = every rank's `in`. `in` may be this
// rank's slice of `out` (in place) or lie outside it.
void hier_allgather_bytes(HierState& s, const void* in, void* out, size_t each) {
  const int local = s.local_size();
  auto* dst = static_cast<uint8_t*>(out);
  if (s.node_major()) {
    // In `out` itself: the node's ranks gather into its region, the leaders gather the
    // regions (each leader's is its slice of the leaders' all-gather), and each leader
    // sends the whole to its node. Nothing staged.
    uint8_t* region = dst + static_cast<size_t>(s.node) * local * each;
    const Buffer node_out = bytes_buffer(region, each * local);
    if (in == region + static_cast<size_t>(s.local_rank) * each) {
      s.await(s.node_group->allgather(node_out));
    } else {
      s.await(s.node_group->allgather(bytes_buffer(const_cast<void*>(in), each), node_out));
    }
    if (s.multi_node()) {
      const Buffer all = bytes_buffer(dst, each * static_cast<size_t>(s.world));
      if (s.leaders_group) s.await(s.leaders_group->allgather(all));
      s.await(s.node_group->broadcast(all, 0));
    }
    return;
  }
  // Nodes interleave global ranks: rounds of at most round_bytes of each rank's part,
  // gathered node-major into `gathered` (world x round bytes, this node's part in its
  // region), then put in global rank order.
  const size_t round = std::min(each, s.round_bytes);
  std::vector<uint8_t> gathered(round * static_cast<size_t>(s.world));
  s.peak_temporary.note(gathered.size());
  const auto* src = static_cast<const uint8_t*>(in);
  for (size_t at = 0; at < each; at += round) {
    const size_t n = std::min(round, each - at);
    uint8_t* region = gathered.data() + static_cast<size_t>(s.node) * local * n;
    s.await(s.node_group->allgather(bytes_buffer(const_cast<uint8_t*>(src + at), n), bytes_buffer(region, n * local)));
    const Buffer all = bytes_buffer(gathered.data(), n * static_cast<size_t>(s.world));
    if (s.leaders_group) s.await(s.leaders_group->allgather(all));
    s.await(s.node_group->broadcast(all, 0));
    // In place, this copies our own part onto itself (the same bytes); later rounds
    // read `in` past `at` only.
    for (int i = 0; i < s.n_nodes(); ++i) {
      for (int j = 0; j < local; ++j) {
        std::memcpy(dst + static_cast<size_t>(s.nodes[i][j]) * each + at,
                    gathered.data() + (static_cast<size_t>(i) * local + j) * n, n);
      }
    }
  }
}

// This rank's slice (out, n elements) of the sum (avg) or min/max over the world of
// `in` (world x n elements). In place (out is our slice of in), the whole buffer is
// all-reduced where it is: nothing staged, and bit-identical to the all-reduce of it.
// Out of place, slice by slice in rounds of at most round_bytes, the same on every
// rank: our slice's rounds straight into `out`, the others' into one round of
// temporary (min(n, round) elements). Bit-identical to the whole all-reduce where its
// stages sum each element in an order of its own (shm: rank order; gloo's leaders:
// a + b at 2 nodes); with 3 nodes or more, gloo's ring order of the node sums can
// differ with the rounds.
void hier_reduce_scatter(HierState& s, const Collective& c) {
  const ReduceOp stage = c.reduce == ReduceOp::avg ? ReduceOp::sum : c.reduce;
  if (c.in_place) {
    hier_allreduce(s, c.in, c.in, true, stage);
  } else {
    const DType d = c.dtype();
    const size_t elem = dtype_size(d);
    const int64_t n = c.out.count;
    const int64_t round = round_elements(s.round_bytes, elem, n);
    std::vector<uint8_t> discard(static_cast<size_t>(round) * elem);
    s.peak_temporary.note(discard.size());
    auto* src = static_cast<uint8_t*>(c.in.data);
    for (int r = 0; r < s.world; ++r) {
      for (int64_t first = 0; first < n; first += round) {
        const int64_t k = std::min(round, n - first);
        void* dst = r == s.rank ? static_cast<uint8_t*>(c.out.data) + static_cast<size_t>(first) * elem : discard.data();
        hier_allreduce(s, typed(src + (static_cast<size_t>(r) * n + first) * elem, k, d), typed(dst, k, d), false, stage);
      }
    }
  }
  if (c.reduce == ReduceOp::avg) divide_elements(c.dtype(), c.out.data, c.out.count, s.world);
}

void hier_barrier(const HierState& s) {
  s.await(s.node_group->barrier());
  if (s.multi_node()) {
    if (s.leaders_group) s.await(s.leaders_group->barrier());
    s.await(s.node_group->barrier());
  }
}

// Publishes this rank's node identity and groups every rank's: nodes ordered by their
// lowest global rank, ranks within a node by global rank.
std::vector<std::vector<int>> find_nodes(Store& store, const BackendArgs& args) {
  store.set("hier/node/" + std::to_string(args.rank), node_identity(args.node_rank));
  std::vector<std::string> keys;
  for (int r = 0; r < args.size; ++r) keys.push_back("hier/node/" + std::to_string(r));
  store.wait(keys, args.timeout);
  std::map<std::string, int> index;  // identity -> node
  std::vector<std::vector<int>> nodes;
  for (int r = 0; r < args.size; ++r) {
    const std::string id = store.get(keys[r], args.timeout);
    auto [it, added] = index.emplace(id, static_cast<int>(nodes.size()));
    if (added) nodes.emplace_back();
    nodes[it->second].push_back(r);
  }
  return nodes;
}

}  // namespace

ProcessGroupHier::ProcessGroupHier(const BackendArgs& args)
    : ThreadedProcessGroup(Setup{"hier", args.rank, args.size, args.timeout, args.store, args.server, args.node_rank}),
      state_(std::make_shared<HierState>()) {
  if (!args.store) throw CollectiveError("the hier backend needs a store to find its nodes");
  HierState& s = *state_;
  s.rank = args.rank;
  s.world = args.size;
  s.timeout = args.timeout;
  s.round_bytes = round_bytes_from_env();
  try {
    s.nodes = find_nodes(*args.store, args);
  } catch (const std::exception& e) {
    throw CollectiveError("hier: rank " + std::to_string(args.rank) + " could not learn the nodes of the " +
                          std::to_string(args.size) + " ranks: " + e.what());
  }
  for (int i = 0; i < s.n_nodes(); ++i) {
    const auto& ranks = s.nodes[i];
    if (auto it = std::find(ranks.begin(), ranks.end(), args.rank); it != ranks.end()) {
      s.node = i;
      s.local_rank = static_cast<int>(it - ranks.begin());
    }
    if (ranks.size() != s.nodes[0].size()) {
      throw CollectiveError("hier: every node must have as many ranks: node 0 (rank " + std::to_string(s.nodes[0][0]) +
                            ") has " + std::to_string(s.nodes[0].size()) + ", node " + std::to_string(i) + " (rank " +
                            std::to_string(ranks[0]) + ") has " + std::to_string(ranks.size()));
    }
  }
  const std::string node_tag = "node" + std::to_string(s.node);
  BackendArgs node_args = args;
  node_args.rank = s.local_rank;
  node_args.size = s.local_size();
  node_args.local_rank = s.local_rank;
  node_args.server = nullptr;
  node_args.store = std::make_shared<PrefixStore>("hier/" + node_tag + "/", args.store);
  node_args.group_name = args.group_name + "." + node_tag;
  node_args.check_ops = false;  // this group checks the whole world's ops itself
  s.node_group = make_shm_group(node_args);
  if (s.multi_node() && s.local_rank == 0) {
    BackendArgs leader_args = args;
    leader_args.rank = s.node;
    leader_args.size = s.n_nodes();
    leader_args.server = nullptr;
    leader_args.store = std::make_shared<PrefixStore>("hier/leaders/", args.store);
    leader_args.group_name = args.group_name + ".leaders";
    leader_args.check_ops = false;
    s.leaders_group = make_gloo_group(leader_args);
  }
  if (args.rank == 0) {
    spdlog::info("collectives: backend hier: {} node{} x {} rank{}{}", s.n_nodes(), s.n_nodes() == 1 ? "" : "s",
                 s.local_size(), s.local_size() == 1 ? "" : "s",
                 s.multi_node() ? ", leaders over gloo" : ", one node: shared memory only");
  }
  if (args.check_ops) {
    check_ops_with([state = state_](const OpFingerprint& mine, OpFingerprint* all, uint64_t) {
      hier_allgather_bytes(*state, &mine, all, sizeof(OpFingerprint));
    });
  }
}

ProcessGroupHier::~ProcessGroupHier() { stop_comm_thread(); }

std::shared_ptr<Work> ProcessGroupHier::run_allreduce(const Collective& c) {
  return submit(c, [s = state_, c] { hier_allreduce(*s, c.in, c.out, c.in_place, c.reduce); });
}

std::shared_ptr<Work> ProcessGroupHier::run_broadcast(const Collective& c) {
  return submit(c, [s = state_, c] {
    if (s->rank == c.root && !c.in_place) std::memcpy(c.out.data, c.in.data, c.out.bytes());
    hier_broadcast(*s, c.out, c.root);
  });
}

std::shared_ptr<Work> ProcessGroupHier::run_allgather(const Collective& c) {
  return submit(c, [s = state_, c] { hier_allgather_bytes(*s, c.in.data, c.out.data, c.in.bytes()); });
}

std::shared_ptr<Work> ProcessGroupHier::run_reduce_scatter(const Collective& c) {
  return submit(c, [s = state_, c] { hier_reduce_scatter(*s, c); });
}

size_t ProcessGroupHier::peak_temporary_bytes() const {
  // The sub-groups' own staging (none today: shm works in its segment, the leaders run
  // Gloo's all-reduce, all-gather and broadcast in our buffers) adds to ours: it happens
  // while ours is held.
  size_t bytes = state_->peak_temporary.get() + state_->node_group->peak_temporary_bytes();
  if (state_->leaders_group) bytes += state_->leaders_group->peak_temporary_bytes();
  return bytes;
}

std::optional<std::chrono::nanoseconds> ProcessGroupHier::comm_thread_cpu_time() const {
  auto total = ThreadedProcessGroup::comm_thread_cpu_time();
  for (const auto& g : {state_->node_group, state_->leaders_group}) {
    if (!g || !total) continue;
    const auto sub = g->comm_thread_cpu_time();
    total = sub ? std::optional(*total + *sub) : std::nullopt;
  }
  return total;
}

std::shared_ptr<Work> ProcessGroupHier::run_barrier(const Collective& c) {
  return submit(c, [s = state_] { hier_barrier(*s); });
}

std::shared_ptr<ProcessGroup> make_hier_group(const BackendArgs& args) {
  return std::make_shared<ProcessGroupHier>(args);
}

}  // namespace tandem
