// A cost model of one DDP step (docs/scaling.md): what each bucket's all-reduce costs on a
// cluster of two tiers (alpha-beta forms), and how those all-reduces overlap backward,
// giving the step time, the exposed communication and the scaling efficiency. Used by
// tandem-plan and by --bucket-cap-mb auto.
//
//   backward:  |--g5--g4--|--g3--g2--|--g1--g0--|            gradients ready at r_i
//   comm:                 [  bucket 0  ][ bucket 1 ]   [b2]  bucket b starts at
//                                                            max(ready_b, end_{b-1})
//   exposed = end of the last bucket - end of backward (never negative)
//
// Invariant: the buckets are cut exactly as the reducer cuts them (cut_buckets is the
// reducer's own plan), so a prediction is of the buckets a real run would have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem::plan {

// One tier's link: the latency of a message and the time per byte it carries.
struct Link {
  double alpha_s = 0;           // seconds per message
  double beta_s_per_byte = 0;   // seconds per byte (1 / bandwidth)
};

// nodes x ranks_per_node ranks; `intra` joins the ranks of a node, `inter` the nodes (a
// node's one network port: its ranks' inter-node traffic shares it).
struct Cluster {
  int nodes = 1;
  int ranks_per_node = 1;
  Link intra, inter;
  int world() const { return nodes * ranks_per_node; }
};

// All-reduce algorithms, each in its alpha-beta form (Thakur, Rabenseifner and Gropp 2005;
// NCCL's tuning model), for n bytes over W = N x p ranks:
//   ring       one ring through every rank: 2(W-1) steps of n/W bytes; a step is as slow
//              as its slowest hop (the inter-node one when N > 1)
//   tree       reduce up and broadcast down a pipelined binary tree of nodes, a chain
//              within each node: 2(ceil(log2 N) alpha_e + (p-1) alpha_i) + 2 n beta
//   two_stage  reduce-scatter within the node, p concurrent rings across nodes on n/p
//              each (sharing the node's port), all-gather within the node
//   leader     Tandem's hier backend: all-reduce within the node, a ring of the nodes'
//              leaders on all n bytes, broadcast within the node
enum class Algorithm { ring, tree, two_stage, leader };
Algorithm parse_algorithm(const std::string& name);  // throws std::invalid_argument naming the choices
const char* algorithm_str(Algorithm a);

// Seconds for one all-reduce of `bytes` on `cluster` with `algorithm`; 0 with one rank.
double allreduce_seconds(Algorithm algorithm, const Cluster& cluster, double bytes);

// A gradient as backward produces it: ready `ready_s` after the profile's origin.
struct GradReady {
  std::string name;
  int64_t bytes = 0;
  double ready_s = 0;
};

// A measured step (from tandem-train's summary: its phase means and grad_ready).
// `ready_s` and `backward_end_s` count from one origin: the start of the synchronising
// micro-batch (the reducer's prepare_for_backward, before its forward).
struct StepProfile {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  double other_s = 0;              // the rest of a step (data, loss, bookkeeping)
  double backward_end_s = 0;       // when the synchronising backward ends; 0: forward_s + backward_s
  std::vector<GradReady> grads;    // in the order they became ready
  double backward_end() const { return backward_end_s > 0 ? backward_end_s : forward_s + backward_s; }
};

// A bucket of consecutive gradients [first, first + count) of the ready order.
struct PlannedBucket {
  size_t first = 0, count = 0;
  int64_t bytes = 0;
};

// The reducer's cut (Reducer::build_buckets calls it): consecutive gradients share a bucket
// while it stays within the cap, the first bucket within `first_cap`; a gradient larger
// than the cap gets its own, and gradient g with `starts_new[g]` set (a dtype or device
// change; empty: none) begins a new one.
std::vector<PlannedBucket> cut_buckets(const std::vector<int64_t>& bytes, int64_t cap, int64_t first_cap,
                                       const std::vector<uint8_t>& starts_new = {});

struct BucketTiming {
  int64_t bytes = 0;
  double ready_s = 0, start_s = 0, end_s = 0;  // from the profile's origin
};

struct Prediction {
  double step_s = 0;
  double compute_s = 0;      // forward + backward + optimizer + other: the step with no communication
  double comm_s = 0;         // the all-reduces' summed time
  double exposed_s = 0;      // communication after backward's end
  double efficiency = 1;     // compute_s / step_s: the per-rank throughput kept
  std::vector<BucketTiming> buckets;
};

// Seconds one all-reduce of `bytes` takes (allreduce_seconds bound to a cluster and an
// algorithm, or a fitted line).
using CostFn = std::function<double(double bytes)>;

// Simulates the step with the buckets all-reduced in order on one communication stream,
// each starting once its last gradient is ready and its predecessor is done. `overlap`
// false: every bucket starts when backward ends (--no-overlap).
Prediction simulate(const StepProfile& profile, const std::vector<PlannedBucket>& buckets, const CostFn& cost,
                    bool overlap = true);

struct BucketChoice {
  int64_t cap = 0, first_cap = 0;
  Prediction prediction;
};

// The cap and first-bucket cap, among `caps` (bytes; each first cap at most its cap),
// that the model predicts fastest; ties go to the larger cap (fewer messages).
BucketChoice best_buckets(const StepProfile& profile, const CostFn& cost, const std::vector<int64_t>& caps);

// Calibration: t = a + b x bytes fitted to measured (bytes, seconds) rows by least squares
// on relative error (each row weighted 1/t^2, so the small sizes, where latency rules,
// count as much as the large ones). Needs two distinct sizes; throws otherwise.
struct LineFit {
  double a_s = 0, b_s_per_byte = 0;
  double max_rel_error = 0;  // over the rows
};
LineFit fit_line(const std::vector<std::pair<double, double>>& bytes_seconds);

// The cost of measured all-reduces as they were measured: linear between the two nearest
// measured sizes (several rows of one size averaged); beyond the smallest and the largest,
// that end's time continued at the fitted line's slope (never below 0). Closer than the
// line where the cost is not linear (a shaper's burst, a protocol switch); needs what
// fit_line needs.
CostFn measured_cost(std::vector<std::pair<double, double>> bytes_seconds);

// The link under a ring all-reduce over `world` ranks on one tier that takes a + b n:
// a = 2(W-1) alpha, b = 2(W-1)/W beta.
Link link_from_ring_fit(const LineFit& fit, int world);

}  // namespace tandem::plan
