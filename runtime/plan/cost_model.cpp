// The DDP step's cost model (see header): collective forms, the overlap, the bucket search.
#include "runtime/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tandem::plan {

Algorithm parse_algorithm(const std::string& name) {
  if (name == "ring") return Algorithm::ring;
  if (name == "tree") return Algorithm::tree;
  if (name == "two-stage") return Algorithm::two_stage;
  if (name == "leader") return Algorithm::leader;
  throw std::invalid_argument("unknown all-reduce algorithm '" + name + "' (ring, tree, two-stage, leader)");
}

const char* algorithm_str(Algorithm a) {
  switch (a) {
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::two_stage: return "two-stage";
    case Algorithm::leader: return "leader";
  }
  return "?";
}

namespace {

// A ring all-reduce of n bytes over k members joined by `link`: 2(k-1) steps of n/k bytes.
double ring(int k, const Link& link, double n) {
  if (k <= 1) return 0;
  return 2.0 * (k - 1) * (link.alpha_s + n / k * link.beta_s_per_byte);
}

}  // namespace

double allreduce_seconds(Algorithm algorithm, const Cluster& c, double n) {
  if (c.nodes < 1 || c.ranks_per_node < 1) throw std::invalid_argument("a cluster needs at least one node and rank");
  const int N = c.nodes, p = c.ranks_per_node, W = c.world();
  if (W == 1) return 0;
  const Link& i = c.intra;
  const Link& e = c.inter;
  switch (algorithm) {
    case Algorithm::ring: {
      if (N == 1) return ring(W, i, n);
      // Every step moves n/W bytes on every hop at once; the step ends with its slowest.
      const double step = std::max(i.alpha_s + n / W * i.beta_s_per_byte, e.alpha_s + n / W * e.beta_s_per_byte);
      return 2.0 * (W - 1) * (p > 1 ? step : e.alpha_s + n / W * e.beta_s_per_byte);
    }
    case Algorithm::tree: {
      // Pipelined: the latency of the tree's depth (both ways) plus the bytes once up and
      // once down through the slowest link on the way.
      const double depth = std::ceil(std::log2(static_cast<double>(N))) * e.alpha_s + (p - 1) * i.alpha_s;
      const double beta = N > 1 ? std::max(e.beta_s_per_byte, p > 1 ? i.beta_s_per_byte : 0.0) : i.beta_s_per_byte;
      return 2.0 * depth + 2.0 * n * beta;
    }
    case Algorithm::two_stage:
      // Reduce-scatter and all-gather within the node (half a ring each); the p rings
      // across nodes carry n/p each through one port: n/N per step in all.
      return ring(p, i, n) + (N > 1 ? 2.0 * (N - 1) * (e.alpha_s + n / N * e.beta_s_per_byte) : 0.0);
    case Algorithm::leader:
      // The node's all-reduce, the leaders' ring on all n bytes, the node's broadcast.
      return ring(p, i, n) + ring(N, e, n) + (p > 1 ? i.alpha_s + n * i.beta_s_per_byte : 0.0);
  }
  return 0;
}

std::vector<PlannedBucket> cut_buckets(const std::vector<int64_t>& bytes, int64_t cap, int64_t first_cap,
                                       const std::vector<uint8_t>& starts_new) {
  if (!starts_new.empty() && starts_new.size() != bytes.size())
    throw std::invalid_argument("cut_buckets: starts_new must have one entry per gradient");
  std::vector<PlannedBucket> out;
  for (size_t g = 0; g < bytes.size(); ++g) {
    // The bucket being filled is the first one while only one exists.
    const int64_t limit = out.size() <= 1 ? first_cap : cap;
    const bool fresh = !starts_new.empty() && starts_new[g];
    if (out.empty() || fresh || out.back().bytes + bytes[g] > limit) out.push_back({g, 0, 0});
    ++out.back().count;
    out.back().bytes += bytes[g];
  }
  return out;
}

Prediction simulate(const StepProfile& profile, const std::vector<PlannedBucket>& buckets, const CostFn& cost,
                    bool overlap) {
  Prediction p;
  p.compute_s = profile.forward_s + profile.backward_s + profile.optimizer_s + profile.other_s;
  const double backward_end = profile.backward_end();
  double free_at = 0;  // when the communication stream is next free
  for (const PlannedBucket& b : buckets) {
    if (b.first + b.count > profile.grads.size()) throw std::invalid_argument("a bucket runs past the gradients");
    BucketTiming t;
    t.bytes = b.bytes;
    for (size_t g = b.first; g < b.first + b.count; ++g) t.ready_s = std::max(t.ready_s, profile.grads[g].ready_s);
    if (!overlap) t.ready_s = std::max(t.ready_s, backward_end);
    t.start_s = std::max(t.ready_s, free_at);
    const double seconds = cost(static_cast<double>(b.bytes));
    t.end_s = t.start_s + seconds;
    free_at = t.end_s;
    p.comm_s += seconds;
    p.buckets.push_back(t);
  }
  p.exposed_s = std::max(0.0, free_at - backward_end);
  p.step_s = p.compute_s + p.exposed_s;
  p.efficiency = p.step_s > 0 ? p.compute_s / p.step_s : 1;
  return p;
}

BucketChoice best_buckets(const StepProfile& profile, const CostFn& cost, const std::vector<int64_t>& caps) {
  std::vector<int64_t> bytes;
  for (const GradReady& g : profile.grads) bytes.push_back(g.bytes);
  BucketChoice best;
  bool any = false;
  std::vector<int64_t> sorted = caps;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t cap : sorted) {
    for (int64_t first : sorted) {
      if (first > cap) break;
      Prediction p = simulate(profile, cut_buckets(bytes, cap, first), cost);
      // Strictly faster wins; an equal time keeps the larger caps met later (fewer messages).
      if (!any || p.step_s <= best.prediction.step_s) best = {cap, first, std::move(p)};
      any = true;
    }
  }
  if (!any) throw std::invalid_argument("no bucket cap to choose from");
  return best;
}

LineFit fit_line(const std::vector<std::pair<double, double>>& rows) {
  // Weighted least squares, weight 1/t^2: minimises the sum of squared relative errors.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : rows) {
    if (!(y > 0) || !(x >= 0)) throw std::invalid_argument("a calibration row needs bytes >= 0 and a positive time");
    const double w = 1.0 / (y * y);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double det = sw * sxx - sx * sx;
  if (rows.size() < 2 || !(det > 0)) throw std::invalid_argument("a fit needs rows of at least two different sizes");
  LineFit f;
  f.b_s_per_byte = (sw * sxy - sx * sy) / det;
  f.a_s = (sy - f.b_s_per_byte * sx) / sw;
  for (const auto& [x, y] : rows) f.max_rel_error = std::max(f.max_rel_error, std::abs(f.a_s + f.b_s_per_byte * x - y) / y);
  return f;
}

CostFn measured_cost(std::vector<std::pair<double, double>> rows) {
  const LineFit line = fit_line(rows);
  std::sort(rows.begin(), rows.end());
  std::vector<std::pair<double, double>> points;  // one per size: the mean time
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < rows.size() && rows[j].first == rows[i].first; ++j) sum += rows[j].second;
    points.emplace_back(rows[i].first, sum / static_cast<double>(j - i));
    i = j;
  }
  return [line, points](double n) {
    if (n <= points.front().first || n >= points.back().first)
      return std::max(0.0, n <= points.front().first ? points.front().second + line.b_s_per_byte * (n - points.front().first)
                                                     : points.back().second + line.b_s_per_byte * (n - points.back().first));
    const auto hi = std::lower_bound(points.begin(), points.end(), std::make_pair(n, 0.0));
    const auto lo = hi - 1;
    return lo->second + (hi->second - lo->second) * (n - lo->first) / (hi->first - lo->first);
  };
}

Link link_from_ring_fit(const LineFit& fit, int world) {
  if (world < 2) throw std::invalid_argument("a ring fit needs at least two ranks");
  return {fit.a_s / (2.0 * (world - 1)), fit.b_s_per_byte * world / (2.0 * (world - 1))};
}

}  // namespace tandem::plan
