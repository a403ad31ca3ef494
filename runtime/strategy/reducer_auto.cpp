// --bucket-cap-mb auto (ReducerOptions::auto_buckets_after): the reducer's caps chosen by
// the cost model (runtime/plan/cost_model.h, docs/scaling.md) from this job's own
// measurements. Every rank times the same all-reduces on the group (a collective: the same
// sizes in the same order everywhere); rank 0 simulates its measured backward (when each
// gradient became ready, when backward ended) against those costs for every candidate cap
// and first cap, and broadcasts the fastest, so every rank cuts the same buckets.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "runtime/plan/cost_model.h"
#include "runtime/host_collectives.h"
#include "runtime/strategy/reducer.h"

namespace tandem {

std::vector<std::pair<int64_t, double>> Reducer::probe_allreduce_ms(int64_t max_bytes) {
  // 64 KiB, 1 MiB, 8 MiB and the whole gradient (at most 64 MiB): sizes the buckets can
  // take, measured where the buckets live (the host when the group stages a device's).
  const int64_t top = std::min(std::max(max_bytes, int64_t{64} << 10), int64_t{64} << 20) / 4 * 4;
  std::vector<int64_t> sizes;
  for (int64_t b : {int64_t{64} << 10, int64_t{1} << 20, int64_t{8} << 20})
    if (b < top) sizes.push_back(b);
  sizes.push_back(top);
  const Device where = group_->takes(buckets_.front().flat.device()) ? buckets_.front().flat.device() : Device::cpu();
  Tensor scratch = Tensor::zeros({sizes.back() / 4}, DType::f32, where);
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t bytes : sizes) {
    std::vector<double> ms;
    for (int rep = 0; rep < 4; ++rep) {  // the first untimed: connections, pages
      const Tensor part = scratch.view(0, {bytes / 4});
      const auto t0 = Tracer::Clock::now();
      group_->allreduce(buffer_of(part), ReduceOp::sum)->synchronize(options_.timeout);
      if (rep > 0) ms.push_back(Tracer::ms_between(t0, Tracer::Clock::now()));
    }
    std::sort(ms.begin(), ms.end());
    out.emplace_back(bytes, ms[ms.size() / 2]);
  }
  return out;
}

void Reducer::choose_bucket_caps() {
  AutoBucketChoice choice;
  choice.bucket_cap_bytes = options_.bucket_cap_bytes;
  choice.first_bucket_cap_bytes = options_.first_bucket_cap_bytes;
  // Nothing to choose between: no communication, one rank, or ZeRO (whose optimizer state
  // is laid out along the buckets as first cut).
  if (!options_.communicate || group_->size() < 2 || options_.zero_stage > 0 || buckets_.empty()) {
    auto_choice_ = choice;
    return;
  }
  // The profile: gradients in bucket order (the ready order since the rebuild).
  plan::StepProfile profile;
  const double n = static_cast<double>(timed_backwards_);
  profile.backward_end_s = backward_end_sum_s_ / n;
  int64_t total = 0;
  for (const Bucket& b : buckets_) {
    for (size_t idx : b.params) {
      const int64_t bytes = static_cast<int64_t>(params_[idx]->value.nbytes());
      profile.grads.push_back({params_[idx]->name, bytes, ready_sum_s_[idx] / n});
      total += bytes;
    }
  }
  choice.probe = probe_allreduce_ms(total);
  std::vector<std::pair<double, double>> rows;
  for (const auto& [bytes, ms] : choice.probe) rows.emplace_back(static_cast<double>(bytes), ms * 1e-3);
  const plan::CostFn cost = plan::measured_cost(rows);
  std::vector<int64_t> sizes;
  for (const auto& g : profile.grads) sizes.push_back(g.bytes);

  // Rank 0 decides: {cap, first cap, predicted and default exposed time in microseconds}.
  std::vector<int64_t> decision(4, 0);
  if (group_->rank() == 0) {
    std::vector<int64_t> caps;
    for (double mib : {0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0})
      caps.push_back(static_cast<int64_t>(mib * (1 << 20)));
    const plan::BucketChoice best = plan::best_buckets(profile, cost, caps);
    const plan::Prediction now =
        plan::simulate(profile,
                       plan::cut_buckets(sizes, static_cast<int64_t>(options_.bucket_cap_bytes),
                                         static_cast<int64_t>(options_.first_bucket_cap_bytes)),
                       cost);
    // Keep the caps in force unless the model predicts a gain.
    const bool better = best.prediction.exposed_s < now.exposed_s;
    decision = {better ? best.cap : static_cast<int64_t>(options_.bucket_cap_bytes),
                better ? best.first_cap : static_cast<int64_t>(options_.first_bucket_cap_bytes),
                static_cast<int64_t>((better ? best.prediction.exposed_s : now.exposed_s) * 1e6),
                static_cast<int64_t>(now.exposed_s * 1e6)};
  }
  host_broadcast(*group_, cpu_buffer(decision.data(), 4), 0, buckets_.front().flat.device(), options_.timeout);
  if (decision[0] <= 0 || decision[1] <= 0 || decision[1] > decision[0])
    throw std::runtime_error("DDP: rank 0 sent invalid bucket caps (" + std::to_string(decision[0]) + ", " +
                             std::to_string(decision[1]) + ")");
  choice.bucket_cap_bytes = static_cast<size_t>(decision[0]);
  choice.first_bucket_cap_bytes = static_cast<size_t>(decision[1]);
  choice.predicted_exposed_ms = static_cast<double>(decision[2]) / 1e3;
  choice.default_exposed_ms = static_cast<double>(decision[3]) / 1e3;

  const size_t old_cap = options_.bucket_cap_bytes, old_first = options_.first_bucket_cap_bytes;
  if (recut(choice.bucket_cap_bytes, choice.first_bucket_cap_bytes))
    trial_ = Trial{old_cap, old_first, sync_sum_s_ * 1e3 / n, 0, 0.0};
  if (group_->rank() == 0) {
    std::string probe;
    for (const auto& [bytes, ms] : choice.probe) {
      char row[64];
      std::snprintf(row, sizeof(row), "%s%lld KiB %.2f ms", probe.empty() ? "" : ", ",
                    static_cast<long long>(bytes >> 10), ms);
      probe += row;
    }
    spdlog::info("DDP buckets (--bucket-cap-mb auto): cap {:.2f} MiB, first {:.2f} MiB, {} bucket(s); predicted "
                 "exposed communication {:.2f} ms a step against {:.2f} ms at the caps before; all-reduces timed on "
                 "this group: {}",
                 choice.bucket_cap_bytes / 1048576.0, choice.first_bucket_cap_bytes / 1048576.0, buckets_.size(),
                 choice.predicted_exposed_ms, choice.default_exposed_ms, probe);
  }
  choice.before_ms = sync_sum_s_ * 1e3 / n;
  auto_choice_ = std::move(choice);
  reset_profile();
}

bool Reducer::recut(size_t cap, size_t first) {
  std::vector<int64_t> sizes;
  std::vector<size_t> order;
  for (const Bucket& b : buckets_) {
    order.insert(order.end(), b.params.begin(), b.params.end());
    for (size_t idx : b.params) sizes.push_back(static_cast<int64_t>(params_[idx]->value.nbytes()));
  }
  const auto before = plan::cut_buckets(sizes, static_cast<int64_t>(options_.bucket_cap_bytes),
                                        static_cast<int64_t>(options_.first_bucket_cap_bytes));
  const auto after = plan::cut_buckets(sizes, static_cast<int64_t>(cap), static_cast<int64_t>(first));
  options_.bucket_cap_bytes = cap;
  options_.first_bucket_cap_bytes = first;
  const bool same = before.size() == after.size() &&
                    std::equal(before.begin(), before.end(), after.begin(),
                               [](const plan::PlannedBucket& a, const plan::PlannedBucket& b) { return a.count == b.count; });
  if (!same) build_buckets(order);
  return !same;
}

void Reducer::reset_profile() {
  // The profile and bucket times in the summary count from here, with these buckets.
  std::fill(ready_sum_s_.begin(), ready_sum_s_.end(), 0.0);
  for (Bucket& b : buckets_) b.comm_sum_s = 0;
  backward_end_sum_s_ = 0;
  sync_sum_s_ = 0;
  timed_backwards_ = 0;
}

void Reducer::end_bucket_trial() {
  const Trial t = *trial_;
  trial_.reset();
  const double after_ms = t.sum_s * 1e3 / kTrialSteps;
  std::vector<int64_t> keep = {after_ms <= t.before_ms ? 1 : 0};
  host_broadcast(*group_, cpu_buffer(keep.data(), 1), 0, buckets_.front().flat.device(), options_.timeout);
  AutoBucketChoice& c = *auto_choice_;
  c.trial_ms = after_ms;
  c.kept = keep[0] == 1;
  if (!c.kept) {
    recut(t.old_cap, t.old_first);
    c.bucket_cap_bytes = t.old_cap;
    c.first_bucket_cap_bytes = t.old_first;
  }
  if (group_->rank() == 0)
    spdlog::info("DDP buckets (--bucket-cap-mb auto): forward, backward and the wait took {:.2f} ms a step with the "
                 "chosen caps against {:.2f} ms before: {} (cap {:.2f} MiB, first {:.2f} MiB)",
                 after_ms, t.before_ms, c.kept ? "kept" : "back to the caps before", c.bucket_cap_bytes / 1048576.0,
                 c.first_bucket_cap_bytes / 1048576.0);
  reset_profile();
}

}  // namespace tandem
