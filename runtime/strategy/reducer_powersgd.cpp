// PowerSGD's gate (ReducerOptions::powersgd, gate model): which buckets compression pays
// for, on this job's own measurements (docs/scaling.md, "PowerSGD").
//
// Per bucket, from the steps before: when its gradients became ready and how long its
// uncompressed all-reduce took; on this rank, the compression arithmetic timed on a copy of
// its gradients; on the group, all-reduces of a few sizes (the probe --bucket-cap-mb auto
// uses), from which the two small compressed all-reduces are predicted. Rank 0 simulates
// the buckets' FIFO against backward (runtime/plan/cost_model.h's rule: a bucket starts
// once ready and once its predecessor is done) with each bucket sent as is or compressed;
// compression's arithmetic is charged in full to the step (the training thread does it).
// Buckets are added greedily while the predicted forward + backward + wait falls. The
// decision is broadcast, so every rank compresses the same buckets.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <string>

#include "runtime/plan/cost_model.h"
#include "runtime/host_collectives.h"
#include "runtime/strategy/reducer.h"

namespace tandem {

namespace {
constexpr double kPowerSgdMargin = 0.10;
}  // namespace

void Reducer::gate_powersgd() {
  if (buckets_.empty()) {  // nothing trains (every rank alike): nothing to decide
    powersgd_->decide({}, {}, 0, 0);
    return;
  }
  const double n = static_cast<double>(timed_backwards_);
  std::vector<PowerSgdBucket> parts;
  std::vector<PowerSgdBucketGate> gates;
  std::vector<double> ready_s;
  int64_t total = 0;
  for (const Bucket& b : buckets_) {
    parts.push_back({b.params, b.offsets});
    PowerSgdBucketGate g;
    g.bytes = b.numel * 4;
    g.sent_bytes = powersgd_->sent_bytes(parts.back());
    g.measured_ms = b.comm_sum_s * 1e3 / n;
    double ready = 0;
    for (size_t idx : b.params) ready = std::max(ready, ready_sum_s_[idx] / n);
    ready_s.push_back(ready);
    total += g.bytes;
    gates.push_back(g);
  }
  // The probe: a collective, every rank alike.
  std::vector<std::pair<double, double>> rows;
  for (const auto& [bytes, ms] : probe_allreduce_ms(total)) rows.emplace_back(static_cast<double>(bytes), ms * 1e-3);
  const plan::CostFn cost = plan::measured_cost(rows);
  // Inside a step an all-reduce also waits for the slowest rank to arrive, which the
  // probe (ranks in step) does not see: the least such wait any bucket showed is charged
  // to each compressed all-reduce too.
  double arrival_ms = std::numeric_limits<double>::infinity();
  for (size_t b = 0; b < buckets_.size(); ++b)
    arrival_ms = std::min(arrival_ms, std::max(0.0, gates[b].measured_ms - cost(static_cast<double>(gates[b].bytes)) * 1e3));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (powersgd_->eligible_bytes(parts[b]) == 0) continue;
    const auto [first, second] = powersgd_->message_bytes(parts[b]);
    gates[b].predicted_ms =
        (cost(static_cast<double>(first)) + cost(static_cast<double>(second))) * 1e3 + 2 * arrival_ms;
    gates[b].compute_ms = powersgd_->time_compression(buckets_[b].flat, parts[b], group_->size());
  }

  // Rank 0 decides: one flag per bucket, then the predicted and the uncompressed step (us).
  const size_t count = buckets_.size();
  std::vector<int64_t> decision(count + 2, 0);
  if (group_->rank() == 0) {
    const double backward_end_ms = backward_end_sum_s_ * 1e3 / n;
    auto step_ms = [&](const std::vector<uint8_t>& on) {
      double free_at = 0, extra = 0;
      for (size_t b = 0; b < count; ++b) {
        const double start = std::max(ready_s[b] * 1e3, free_at);
        free_at = start + (on[b] ? gates[b].predicted_ms : gates[b].measured_ms);
        if (on[b]) extra += gates[b].compute_ms;
      }
      return backward_end_ms + extra + std::max(0.0, free_at - backward_end_ms);
    };
    std::vector<uint8_t> on(count, 0);
    const double uncompressed = step_ms(on);
    double best = uncompressed;
    for (;;) {  // greedy: the bucket whose compression lowers the step most, while one does
      size_t pick = count;
      double pick_t = best;
      for (size_t b = 0; b < count; ++b) {
        if (on[b] || powersgd_->eligible_bytes(parts[b]) == 0) continue;
        on[b] = 1;
        const double t = step_ms(on);
        on[b] = 0;
        if (t < pick_t) pick_t = t, pick = b;
      }
      if (pick == count) break;
      on[pick] = 1;
      best = pick_t;
    }
    // The model's step-time error on this machine is about 10% (docs/scaling.md): a
    // predicted gain smaller than that is not worth the approximation it brings.
    if (best > (1 - kPowerSgdMargin) * uncompressed) {
      std::fill(on.begin(), on.end(), 0);
      best = uncompressed;
    }
    for (size_t b = 0; b < count; ++b) decision[b] = on[b];
    decision[count] = static_cast<int64_t>(best * 1e3);
    decision[count + 1] = static_cast<int64_t>(uncompressed * 1e3);
  }
  host_broadcast(*group_, cpu_buffer(decision.data(), static_cast<int64_t>(decision.size())), 0,
                 buckets_.front().flat.device(), options_.timeout);
  for (size_t b = 0; b < count; ++b) {
    if (decision[b] != 0 && decision[b] != 1)
      throw std::runtime_error("DDP: rank 0 sent an invalid PowerSGD decision");
    gates[b].compress = decision[b] == 1;
  }
  const double predicted = static_cast<double>(decision[count]) / 1e3;
  const double uncompressed = static_cast<double>(decision[count + 1]) / 1e3;
  powersgd_->decide(parts, gates, predicted, uncompressed);

  if (group_->rank() != 0) return;
  size_t chosen = 0;
  for (size_t b = 0; b < count; ++b) {
    const PowerSgdBucketGate& g = gates[b];
    chosen += g.compress;
    if (powersgd_->eligible_bytes(parts[b]) == 0) {
      spdlog::info("PowerSGD gate: bucket {} ({:.2f} MiB): nothing to compress (1-D or too small to pay)", b,
                   g.bytes / 1048576.0);
      continue;
    }
    spdlog::info("PowerSGD gate: bucket {} ({:.2f} MiB, {:.1f} KiB compressed): all-reduce {:.2f} ms as is, {:.2f} ms "
                 "compressed + {:.2f} ms arithmetic: {}",
                 b, g.bytes / 1048576.0, g.sent_bytes / 1024.0, g.measured_ms, g.predicted_ms, g.compute_ms,
                 g.compress ? "compress" : "as is");
  }
  if (chosen == 0)
    spdlog::info("PowerSGD gate: the cost model keeps every bucket uncompressed: compression would not save 10% of "
                 "the step on this link (forward, backward and the wait: {:.2f} ms a step as is; each compressed "
                 "all-reduce charged {:.2f} ms for the ranks' arrival)",
                 uncompressed, arrival_ms);
  else
    spdlog::info("PowerSGD gate: {} of {} bucket(s) compressed at rank {} from step {}: forward, backward and the "
                 "wait predicted {:.2f} ms a step against {:.2f} ms uncompressed",
                 chosen, count, options_.powersgd.rank, powersgd_->steps(), predicted, uncompressed);
}

}  // namespace tandem
