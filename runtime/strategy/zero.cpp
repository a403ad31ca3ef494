// ZeRO-1: shard layout, the sharded update, the parameter all-gathers and the full
// state for checkpoints.
#include "runtime/strategy/zero.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/kernels.h"
#include "runtime/host_collectives.h"

namespace tandem {

ZeroShards::ZeroShards(std::vector<Parameter*> params, std::vector<BucketLayout> buckets,
                       std::shared_ptr<ProcessGroup> group, const OptimizerConfig& config,
                       std::chrono::milliseconds timeout, Tracer* tracer)
    : params_(std::move(params)), group_(std::move(group)), config_(config), timeout_(timeout),
      tracer_(tracer && tracer->enabled() ? tracer : nullptr) {
  const int64_t world = group_->size(), rank = group_->rank();
  std::vector<ParamRange> ranges;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket bucket;
    bucket.layout = std::move(buckets[b]);
    const BucketLayout& l = bucket.layout;
    if (l.padded % world != 0) throw std::logic_error("ZeRO: a bucket not padded to a multiple of the world size");
    const int64_t shard = l.padded / world;
    bucket.lo = std::min(l.numel, rank * shard);
    bucket.hi = std::min(l.numel, (rank + 1) * shard);
    // The parameters become views into the bucket's buffer (values copied in), one at a
    // time, each original released as soon as it is copied: at most one parameter is held
    // twice, never the whole model (the buffer's untouched pages are not resident yet).
    const DType dtype = params_[l.params.front()]->value.dtype();
    const Device device = params_[l.params.front()]->value.device();
    // Shared where the group offers it (shm: every rank copies the other shards from
    // their owners' buffers in the gather, no copy in); allocated alike on every rank.
    bucket.params = bucket_buffer(*group_, l.padded, dtype, device, true);
    if (l.padded > l.numel)
      bucket.params.view(l.numel, {l.padded - l.numel}).copy_from(Tensor::zeros({l.padded - l.numel}, dtype, device));
    for (size_t j = 0; j < l.params.size(); ++j) {
      Parameter& p = *params_[l.params[j]];
      Tensor view = bucket.params.view(l.offsets[j], p.value.shape());
      view.copy_from(p.value);
      p.value = view;
      bucket_of_[&p] = b;
      // The piece of this parameter inside the owned shard, if any.
      const int64_t from = std::max(bucket.lo, l.offsets[j]);
      const int64_t to = std::min(bucket.hi, l.offsets[j] + p.value.numel());
      if (to > from) {
        ranges.push_back({l.params[j], from - l.offsets[j], to - from});
        range_bucket_.push_back(b);
        range_at_.push_back(from);
      }
    }
    buckets_.push_back(std::move(bucket));
  }
  optimizer_ = make_sharded_optimizer(config_, params_, std::move(ranges));
  // Every rank's squared shard norm, gathered (not all-reduced: a float sum would depend
  // on the backend's order); each rank adds the W doubles in rank order, the same on all.
  optimizer_->set_norm_reduction(world, rank, [this](Tensor& parts) {
    group_->allgather(buffer_of(parts))->wait(timeout_);
  });
  claimed_.assign(buckets_.size(), 0);
}

ZeroShards::~ZeroShards() {
  // The buffers must outlive any gather still in flight (an exception mid-step).
  for (Bucket& b : buckets_) {
    if (b.gather && !b.gather->is_completed()) {
      try {
        b.gather->synchronize(timeout_);
      } catch (...) {
      }
    }
  }
}

void ZeroShards::wait(size_t i) {
  Bucket& b = buckets_[i];
  if (!b.gather) return;
  const auto t0 = Tracer::Clock::now();
  b.gather->wait(timeout_);
  const auto t1 = Tracer::Clock::now();
  wait_ms_ += Tracer::ms_between(t0, t1);
  if (tracer_)
    tracer_->add("allgather bucket " + std::to_string(i) + " (" + std::to_string(b.params.nbytes()) + " B)",
                 Tracer::comm, b.launched_at, b.gather->completed_at().value_or(t1));
  b.gather.reset();
}

void ZeroShards::wait_all() {
  for (size_t i = 0; i < buckets_.size(); ++i) wait(i);
}

void ZeroShards::begin_forward() {
  if (!per_layer_) wait_all();
  std::fill(claimed_.begin(), claimed_.end(), 0);
}

void ZeroShards::wait_for(Module& module) {
  auto it = module_buckets_.find(&module);
  if (it == module_buckets_.end()) {
    std::vector<size_t> mine;
    for (const Parameter* p : module.parameters()) {
      auto b = bucket_of_.find(p);
      if (b != bucket_of_.end() && std::find(mine.begin(), mine.end(), b->second) == mine.end())
        mine.push_back(b->second);
    }
    it = module_buckets_.emplace(&module, std::move(mine)).first;
  }
  for (size_t b : it->second) {
    claimed_[b] = 1;
    wait(b);
  }
}

void ZeroShards::end_forward_backward(PhaseTimes& times) {
  if (!checked_) {
    // Only the first forward is observed: nothing was in flight then, so a model whose
    // forward skips the pre-hook has read nothing early, and waits for all from now on.
    checked_ = true;
    per_layer_ = std::all_of(claimed_.begin(), claimed_.end(), [](uint8_t c) { return c != 0; });
  }
  times.exposed_comm_ms += wait_ms_;
  wait_ms_ = 0;
}

void ZeroShards::step(float lr) {
  // Buckets no layer waited for in this step's forward (unused layers) are still in flight.
  wait_all();
  wait_ms_ = 0;  // not a forward's wait
  optimizer_->step(lr);
  // Last bucket first: it holds the first layers, which the next forward reads first.
  for (size_t i = buckets_.size(); i-- > 0;) {
    Bucket& b = buckets_[i];
    b.launched_at = Tracer::Clock::now();
    b.gather = group_->allgather(buffer_of(b.params));
  }
}

namespace {
// For each of `params`, its index in a plain optimizer built over them (which leaves the
// frozen ones out: they are in no bucket, so no layout names them).
std::vector<size_t> plain_indices(const std::vector<Parameter*>& params, const Optimizer& plain) {
  std::vector<size_t> out(params.size(), static_cast<size_t>(-1));
  for (size_t i = 0, j = 0; i < params.size() && j < plain.parameters().size(); ++i)
    if (params[i] == plain.parameters()[j]) out[i] = j++;
  return out;
}
}  // namespace

std::unique_ptr<Optimizer> ZeroShards::full_optimizer(bool gather) {
  std::unique_ptr<Optimizer> full = make_optimizer(config_, params_);
  full->set_steps_taken(optimizer_->steps_taken());
  if (!gather) return full;
  const std::vector<size_t> plain = plain_indices(params_, *full);
  const size_t slots = optimizer_->slot_names().size();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    const BucketLayout& l = b.layout;
    for (size_t s = 0; s < slots; ++s) {
      // This rank's shard of the slot into its slice of a bucket-sized buffer, gathered.
      Tensor all = Tensor::zeros({l.padded}, DType::f32, b.params.device());
      for (size_t r = 0; r < range_bucket_.size(); ++r)
        if (range_bucket_[r] == bi) all.view(range_at_[r], {optimizer_->ranges()[r].count}).copy_from(optimizer_->slot(r, s));
      group_->allgather(buffer_of(all))->wait(timeout_);
      for (size_t j = 0; j < l.params.size(); ++j) {
        Tensor& dst = full->slot(plain[l.params[j]], s);  // a plain optimizer: range i is its parameter i
        dst.copy_from(all.view(l.offsets[j], dst.shape()));
      }
    }
  }
  return full;
}

void ZeroShards::load_from(Optimizer& full) {
  if (full.sharded() || full.slot_names() != optimizer_->slot_names())
    throw std::logic_error("ZeRO: loading from an optimizer of another layout");
  const std::vector<size_t> plain = plain_indices(params_, full);
  for (size_t r = 0; r < optimizer_->ranges().size(); ++r) {
    const ParamRange& range = optimizer_->ranges()[r];
    if (plain[range.param] >= full.parameters().size())
      throw std::logic_error("ZeRO: loading from an optimizer without parameter '" + params_[range.param]->name + "'");
    for (size_t s = 0; s < optimizer_->slot_names().size(); ++s)
      optimizer_->slot(r, s).copy_from(full.slot(plain[range.param], s).view(range.first, {range.count}));
  }
  optimizer_->set_steps_taken(full.steps_taken());
}

int64_t ZeroShards::full_state_bytes() const {
  int64_t numel = 0;
  for (const Parameter* p : params_)
    if (p->requires_grad) numel += p->value.numel();
  return numel * static_cast<int64_t>(optimizer_->slot_names().size() * sizeof(float));
}

}  // namespace tandem
