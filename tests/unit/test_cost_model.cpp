// The DDP step's cost model (runtime/plan/cost_model.h): each algorithm's form on values
// worked by hand, the reducer's bucket cut, the overlap simulation, the bucket search and
// the calibration fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include "runtime/plan/cost_model.h"

namespace tandem::plan {
namespace {

constexpr double kTol = 1e-12;

TEST(CostModel, AllReduceFormsOnOneNode) {
  Cluster c;
  c.ranks_per_node = 4;
  c.intra = {10e-6, 1e-9};  // 10 us, 1 GB/s
  // ring: 2(W-1) (alpha + n/W beta) = 6 (10e-6 + 1e-3)
  EXPECT_NEAR(allreduce_seconds(Algorithm::ring, c, 4e6), 6.06e-3, kTol);
  // tree on one node: a chain of 4, 2 (3 alpha) + 2 n beta
  EXPECT_NEAR(allreduce_seconds(Algorithm::tree, c, 4e6), 6e-5 + 8e-3, kTol);
  c.ranks_per_node = 1;
  EXPECT_EQ(allreduce_seconds(Algorithm::ring, c, 4e6), 0.0);
}

TEST(CostModel, AllReduceFormsAcrossNodes) {
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 2;
  c.intra = {1e-6, 1e-10};  // 10 GB/s within the node
  c.inter = {1e-5, 1e-9};   // 1 GB/s between nodes
  const double n = 4e6;
  // ring: each of 6 steps as slow as the inter-node hop: 10e-6 + 1e6 x 1e-9
  EXPECT_NEAR(allreduce_seconds(Algorithm::ring, c, n), 6 * 1.01e-3, kTol);
  // tree: depth 1 node level + 1 chain hop, both ways; 2 n beta_inter
  EXPECT_NEAR(allreduce_seconds(Algorithm::tree, c, n), 2 * 1.1e-5 + 8e-3, kTol);
  // two-stage: the node's ring 2 (1e-6 + 2e6 x 1e-10) + the nodes' 2 (1e-5 + 2e6 x 1e-9)
  EXPECT_NEAR(allreduce_seconds(Algorithm::two_stage, c, n), 4.02e-4 + 4.02e-3, kTol);
  // leader: the same two rings (the leaders' on all n over 2 nodes) + the node's broadcast
  EXPECT_NEAR(allreduce_seconds(Algorithm::leader, c, n), 4.02e-4 + 4.02e-3 + (1e-6 + 4e-4), kTol);
  EXPECT_EQ(parse_algorithm("two-stage"), Algorithm::two_stage);
  EXPECT_THROW(parse_algorithm("butterfly"), std::invalid_argument);
}

TEST(CostModel, CutsBucketsAsTheReducer) {
  // First cap 4: the first bucket holds 4 bytes; then cap 8; a 10-byte gradient alone.
  const auto b = cut_buckets({4, 4, 4, 10, 1, 1}, 8, 4);
  ASSERT_EQ(b.size(), 4u);
  const std::vector<std::array<int64_t, 3>> want = {{0, 1, 4}, {1, 2, 8}, {3, 1, 10}, {4, 2, 2}};  // first, count, bytes
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(static_cast<int64_t>(b[i].first), want[i][0]) << i;
    EXPECT_EQ(static_cast<int64_t>(b[i].count), want[i][1]) << i;
    EXPECT_EQ(b[i].bytes, want[i][2]) << i;
  }
  // A dtype or device change starts a bucket however much room is left.
  const auto split = cut_buckets({1, 1, 1}, 8, 8, {0, 0, 1});
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[1].first, 2u);
  EXPECT_THROW(cut_buckets({1, 1}, 8, 8, {0}), std::invalid_argument);
}

StepProfile profile() {
  StepProfile p;
  p.forward_s = 0.005, p.backward_s = 0.010, p.optimizer_s = 0.001;
  p.backward_end_s = 0.010;  // ready times from backward's start here
  p.grads = {{"w3", 3'000'000, 0.002}, {"b3", 1'000'000, 0.004}, {"w2", 1'000'000, 0.006}, {"w1", 2'000'000, 0.010}};
  return p;
}

TEST(CostModel, SimulatesTheBucketFifoAgainstBackward) {
  const CostFn one_ms_per_mb = [](double bytes) { return bytes * 1e-9; };
  const StepProfile p = profile();
  // Each gradient its own bucket: 2-5, 5-6 (waits for the stream), 6-7, 10-12 ms.
  const Prediction each = simulate(p, cut_buckets({3'000'000, 1'000'000, 1'000'000, 2'000'000}, 1, 1), one_ms_per_mb);
  ASSERT_EQ(each.buckets.size(), 4u);
  EXPECT_NEAR(each.buckets[1].start_s, 0.005, kTol);
  EXPECT_NEAR(each.buckets[1].end_s, 0.006, kTol);
  EXPECT_NEAR(each.exposed_s, 0.002, kTol);
  EXPECT_NEAR(each.comm_s, 0.007, kTol);
  EXPECT_NEAR(each.compute_s, 0.016, kTol);
  EXPECT_NEAR(each.step_s, 0.018, kTol);
  EXPECT_NEAR(each.efficiency, 0.016 / 0.018, kTol);
  // Without overlap every bucket waits for backward's end: 7 ms exposed.
  const Prediction late =
      simulate(p, cut_buckets({3'000'000, 1'000'000, 1'000'000, 2'000'000}, 1, 1), one_ms_per_mb, false);
  EXPECT_NEAR(late.exposed_s, 0.007, kTol);
}

TEST(CostModel, BestBucketsFollowsTheLatency) {
  const std::vector<int64_t> caps = {1'000'000, 2'000'000, 4'000'000, 8'000'000};
  // 10 ms per message: one bucket of all 7 MB (exposed 10 + 7 ms) beats every split.
  const BucketChoice few = best_buckets(profile(), [](double n) { return 0.010 + n * 1e-9; }, caps);
  EXPECT_EQ(few.cap, 8'000'000);
  EXPECT_EQ(few.first_cap, 8'000'000);
  EXPECT_NEAR(few.prediction.exposed_s, 0.017, kTol);
  // No latency: buckets as small as the gradients overlap most (2 ms exposed, the last
  // gradient's own all-reduce); among equal times the larger caps win.
  const BucketChoice many = best_buckets(profile(), [](double n) { return n * 1e-9; }, caps);
  EXPECT_NEAR(many.prediction.exposed_s, 0.002, kTol);
  EXPECT_EQ(many.cap, 2'000'000);
  EXPECT_EQ(many.first_cap, 2'000'000);
  EXPECT_THROW(best_buckets(profile(), [](double) { return 0.0; }, {}), std::invalid_argument);
}

TEST(CostModel, FitsALineAndARingsLink) {
  // Exact rows of 20 us + 1 ns/B.
  std::vector<std::pair<double, double>> rows;
  for (double n : {1e3, 1e5, 1e6, 1e7}) rows.emplace_back(n, 20e-6 + n * 1e-9);
  const LineFit f = fit_line(rows);
  EXPECT_NEAR(f.a_s, 20e-6, 1e-15);
  EXPECT_NEAR(f.b_s_per_byte, 1e-9, 1e-18);
  EXPECT_LT(f.max_rel_error, 1e-9);
  // Over 4 ranks: a = 6 alpha, b = 6/4 beta.
  const Link l = link_from_ring_fit(f, 4);
  EXPECT_NEAR(l.alpha_s, 20e-6 / 6, 1e-15);
  EXPECT_NEAR(l.beta_s_per_byte, 1e-9 * 4 / 6, 1e-18);
  EXPECT_THROW(fit_line({{1e3, 1e-5}, {1e3, 2e-5}}), std::invalid_argument);
  EXPECT_THROW(fit_line({{1e3, 0.0}, {1e4, 2e-5}}), std::invalid_argument);
  EXPECT_THROW(link_from_ring_fit(f, 1), std::invalid_argument);
}

TEST(CostModel, MeasuredCostInterpolatesBetweenSizes) {
  // Not a line: 1, 3 (twice: 2.5 and 3.5), 4 ms at 1000, 2000 and 4000 bytes.
  const std::vector<std::pair<double, double>> rows = {{4000, 4e-3}, {1000, 1e-3}, {2000, 2.5e-3}, {2000, 3.5e-3}};
  const CostFn cost = measured_cost(rows);
  EXPECT_NEAR(cost(1500), 2e-3, kTol);
  EXPECT_NEAR(cost(2000), 3e-3, kTol);
  EXPECT_NEAR(cost(3000), 3.5e-3, kTol);
  EXPECT_NEAR(cost(4000), 4e-3, kTol);
  const double slope = fit_line(rows).b_s_per_byte;
  EXPECT_NEAR(cost(8000), 4e-3 + 4000 * slope, kTol);
  EXPECT_NEAR(cost(500), std::max(0.0, 1e-3 - 500 * slope), kTol);
  EXPECT_GE(cost(0), 0.0);
}

}  // namespace
}  // namespace tandem::plan
