// Reducer implementation: bucket assignment, ready counting, ordered launch, finalize.
#include "runtime/strategy/reducer.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/plan/cost_model.h"
#include "runtime/host_collectives.h"

namespace tandem {

Reducer::Reducer(std::vector<Parameter*> params, std::shared_ptr<ProcessGroup> group, ReducerOptions options,
                 Tracer* tracer)
    : params_(std::move(params)), group_(std::move(group)), options_(options),
      tracer_(tracer && tracer->enabled() ? tracer : nullptr) {
  if (options_.zero_stage < 0 || options_.zero_stage > 1)
    throw std::invalid_argument("ZeRO stage " + std::to_string(options_.zero_stage) +
                                " is not built (0: off, 1: shard the optimizer state)");
  if (options_.zero_stage > 0 && (options_.hook != CommHookKind::none || options_.custom_hook))
    throw std::invalid_argument("ZeRO-1 reduce-scatters the gradients itself: it takes no comm hook");
  if (options_.zero_stage > 0 && !options_.communicate)
    throw std::invalid_argument("ZeRO-1 needs gradient communication (each rank updates only its shard)");
  if (options_.hook == CommHookKind::powersgd && !options_.custom_hook) {
    if (options_.auto_buckets_after > 0)
      throw std::invalid_argument("PowerSGD's gate and --bucket-cap-mb auto would both time the first steps and "
                                  "change the buckets under each other: give PowerSGD a fixed --bucket-cap-mb");
    if (!options_.communicate) throw std::invalid_argument("PowerSGD compresses gradient communication: not with --no-comm");
    powersgd_ = std::make_unique<PowerSgd>(options_.powersgd, params_);
  }
  for (size_t i = 0; i < params_.size(); ++i) index_of_[params_[i]] = i;
  std::vector<size_t> reverse;
  for (size_t idx = params_.size(); idx-- > 0;)
    if (params_[idx]->requires_grad) reverse.push_back(idx);
  build_buckets(reverse);
  marked_.assign(params_.size(), 0);
  ready_sum_s_.assign(params_.size(), 0.0);
}

Reducer::~Reducer() {
  // Buckets' buffers must outlive any op still in flight (an exception mid-step).
  for (Bucket& b : buckets_) {
    if (b.work && !b.work->is_completed()) {
      try {
        b.work->synchronize(options_.timeout);
      } catch (...) {
      }
    }
  }
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  // Plan: consecutive parameters (in `order`) share a bucket while it stays under the
  // cap and they agree on dtype and device (the cost model cuts with the same function).
  std::vector<int64_t> sizes;
  std::vector<uint8_t> starts_new;
  for (size_t k = 0; k < order.size(); ++k) {
    const Tensor& v = params_[order[k]]->value;
    sizes.push_back(static_cast<int64_t>(v.nbytes()));
    const Tensor* prev = k ? &params_[order[k - 1]]->value : nullptr;
    starts_new.push_back(prev && (prev->dtype() != v.dtype() || prev->device() != v.device()));
  }
  std::vector<std::vector<size_t>> groups;
  for (const plan::PlannedBucket& b :
       plan::cut_buckets(sizes, static_cast<int64_t>(options_.bucket_cap_bytes),
                         static_cast<int64_t>(options_.first_bucket_cap_bytes), starts_new))
    groups.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(b.first),
                        order.begin() + static_cast<std::ptrdiff_t>(b.first + b.count));

  std::vector<Bucket> buckets(groups.size());
  bucket_of_.assign(params_.size(), kNoBucket);
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets[b];
    int64_t numel = 0;
    for (size_t idx : groups[b]) {
      bucket.params.push_back(idx);
      bucket.offsets.push_back(numel);
      numel += params_[idx]->value.numel();
      bucket_of_[idx] = b;
    }
    const Tensor& first = params_[groups[b].front()]->value;
    bucket.numel = numel;
    // ZeRO: equal shards for the reduce-scatter; the last rank's shard ends in padding.
    const int64_t world = group_->size();
    const int64_t padded = options_.zero_stage > 0 ? (numel + world - 1) / world * world : numel;
    // Filled one gradient at a time, each old one released as soon as it is copied, so
    // that at most one parameter's gradient is held twice (not the whole model's): the
    // buffer's untouched pages are not resident yet.
    bucket.flat = allocate_flat(padded, first.dtype(), first.device());
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      Parameter& p = *params_[bucket.params[j]];
      Tensor view = bucket.flat.view(bucket.offsets[j], p.value.shape());
      view.copy_from(p.grad.defined() ? p.grad : Tensor::zeros(p.value.shape(), first.dtype(), first.device()));
      p.grad = view;
    }
    if (padded > numel)
      bucket.flat.view(numel, {padded - numel}).copy_from(Tensor::zeros({padded - numel}, first.dtype(), first.device()));
    const bool direct = group_->takes(bucket.flat.device());
    bucket.pending = bucket.params.size();
    if (options_.zero_stage > 0) {
      if (!direct)
        throw std::invalid_argument("ZeRO needs a backend that takes the bucket's device directly (" +
                                    bucket.flat.device().str() + " on " + group_->backend_name() +
                                    "): on a GPU, nccl");
      continue;  // reduce-scattered by launch(), no hook
    }
    bucket.hook = options_.custom_hook ? options_.custom_hook(bucket.flat, direct)
                  : powersgd_       ? powersgd_->make_hook(bucket.flat, {bucket.params, bucket.offsets}, direct)
                                    : make_comm_hook(options_.hook, bucket.flat, direct);
    if (!bucket.hook) throw std::invalid_argument("DDP: the custom comm hook factory returned no hook");
  }
  buckets_ = std::move(buckets);
  next_launch_ = 0;
}

Tensor Reducer::allocate_flat(int64_t numel, DType dtype, Device device) {
  // Shared where the backend offers it (bucket_buffer): for buckets all-reduced or (ZeRO)
  // reduce-scattered as they are. The buckets are cut alike on every rank, so every rank
  // asks for the same sizes in the same order. Under ZeRO each rank reads its slice of
  // every peer's buffer, which its RSS then counts too (PSS shares it out: docs/zero.md).
  const bool shareable = options_.communicate && !options_.custom_hook && options_.hook == CommHookKind::none;
  return bucket_buffer(*group_, numel, dtype, device, shareable);
}

void Reducer::prepare_for_backward() {
  prepared_at_ = Tracer::Clock::now();
  std::fill(marked_.begin(), marked_.end(), 0);
  ready_order_.clear();
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    // ZeRO: the padding joins the reduce-scatter; keep it zero (a few elements).
    if (b.flat.numel() > b.numel)
      kernels_for(b.flat.device()).fill(b.flat.f32() + b.numel, b.flat.numel() - b.numel, 0.f);
  }
  next_launch_ = 0;
}

void Reducer::mark_ready(Parameter& param) {
  auto it = index_of_.find(&param);
  if (it == index_of_.end())
    throw std::logic_error("reducer: gradient-ready for '" + param.name + "', which DDP does not manage");
  size_t idx = it->second;
  if (bucket_of_[idx] == kNoBucket) return;  // frozen: nothing to reduce
  if (marked_[idx])
    throw std::runtime_error("DDP: parameter '" + param.name +
                             "' was marked ready twice in one backward (a module used twice in "
                             "forward is not supported by the reducer)");
  marked_[idx] = 1;
  ready_order_.push_back(idx);
  if (rebuilt_) ready_sum_s_[idx] += std::chrono::duration<double>(Tracer::Clock::now() - prepared_at_).count();
  Bucket& b = buckets_[bucket_of_[idx]];
  --b.pending;
  if (options_.overlap && b.pending == 0) launch_ready_in_order();
}

void Reducer::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void Reducer::launch(size_t i) {
  Bucket& b = buckets_[i];
  if (!options_.communicate) return;
  b.launched_at = Tracer::Clock::now();
  b.work = options_.zero_stage > 0 ? group_->reduce_scatter(buffer_of(b.flat), ReduceOp::avg)
                                   : b.hook->launch(*group_, b.flat);
}

std::string Reducer::missing_report() const {
  std::ostringstream out;
  std::vector<std::string> names;
  for (size_t idx = 0; idx < params_.size(); ++idx)
    if (!marked_[idx] && bucket_of_[idx] != kNoBucket) names.push_back(params_[idx]->name);
  out << "DDP: " << names.size() << " parameter(s) received no gradient in this backward: ";
  for (size_t i = 0; i < names.size() && i < 20; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > 20) out << ", ...";
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].pending > 0)
      out << "; bucket " << b << ": " << buckets_[b].params.size() - buckets_[b].pending << "/"
          << buckets_[b].params.size() << " params ready";
  out << ". If the model leaves parameters unused in some steps, enable find_unused_parameters "
         "(tandem-train --find-unused-parameters).";
  return out.str();
}

void Reducer::finalize_backward(PhaseTimes& times) {
  auto t0 = Tracer::Clock::now();
  if (rebuilt_) backward_end_sum_s_ += std::chrono::duration<double>(t0 - prepared_at_).count();
  // Exposed communication is what the compute stream waits for: marked on it, so on a
  // GPU (where nccl's wait makes the stream wait and the host goes on) it is still the
  // device's wait, read after the step.
  Kernels* k = params_.empty() ? nullptr : &kernels_for(params_.front()->value.device());
  std::shared_ptr<Kernels::TimeMark> before_wait = k ? k->mark() : nullptr;
  bool missing = std::any_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.pending > 0; });
  if (missing) {
    if (!options_.find_unused) throw std::runtime_error(missing_report());
    // Unused parameters contribute zero: their gradient (zeroed at the start of the
    // step, or holding earlier micro-steps' sums) is reduced as it is, on every rank.
    for (Bucket& b : buckets_) b.pending = 0;
  }
  launch_ready_in_order();  // with overlap off, or after unused parameters: everything left
  // Each bucket's first collective completes in order; a hook with further stages
  // (PowerSGD's second all-reduce) starts them bucket by bucket, round after round, so
  // every rank issues them alike.
  Tracer::Clock::time_point first_launch = t0, last_done = t0;
  bool any = false;
  std::vector<size_t> staged;
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (buckets_[i].work) staged.push_back(i);
  while (!staged.empty()) {
    std::vector<size_t> again;
    for (size_t i : staged) {
      Bucket& b = buckets_[i];
      Tracer::Clock::time_point done;
      if (advance(i, done)) {
        again.push_back(i);
        continue;
      }
      if (b.hook) b.hook->finish(b.flat);
      if (rebuilt_) b.comm_sum_s += std::chrono::duration<double>(done - b.launched_at).count();
      if (!any || b.launched_at < first_launch) first_launch = b.launched_at;
      if (!any || done > last_done) last_done = done;
      any = true;
      if (tracer_)
        tracer_->add((options_.zero_stage > 0 ? "reduce-scatter bucket " : "allreduce bucket ") + std::to_string(i) +
                         " (" + std::to_string(b.flat.nbytes()) + " B)",
                     Tracer::comm, b.launched_at, done);
    }
    staged = std::move(again);
  }
  auto t1 = Tracer::Clock::now();
  if (k) times.defer(*k, before_wait, k->mark(), &PhaseTimes::exposed_comm_ms);
  if (any) times.comm_ms += Tracer::ms_between(first_launch, last_done);
  if (tracer_) tracer_->add("wait for gradients", Tracer::compute, t0, t1);

  const double sync_s = std::chrono::duration<double>(Tracer::Clock::now() - prepared_at_).count();
  if (rebuilt_) ++timed_backwards_, sync_sum_s_ += sync_s;
  if (powersgd_) powersgd_->end_step();
  if (!rebuilt_) {
    rebuild_from_rank0_order();
  } else if (powersgd_ && !powersgd_->decided() && timed_backwards_ >= 2 &&
             powersgd_->steps() >= options_.powersgd.start_step) {
    gate_powersgd();
  } else if (options_.auto_buckets_after > 0 && !auto_choice_ && timed_backwards_ >= options_.auto_buckets_after) {
    choose_bucket_caps();
  } else if (trial_ && ++trial_->seen > 1) {
    trial_->sum_s += sync_s;
    if (trial_->seen == 1 + kTrialSteps) end_bucket_trial();
  }
}

bool Reducer::advance(size_t i, Tracer::Clock::time_point& done) {
  Bucket& b = buckets_[i];
  // CPU backends: blocks until reduced. nccl: makes the compute stream wait for the
  // communication stream; the host goes on (no host synchronisation inside a step).
  b.work->wait(options_.timeout);
  // When the op really finished (it may have been long before this wait), where the
  // backend knows it; else when the wait saw it.
  done = b.work->completed_at().value_or(Tracer::Clock::now());
  std::shared_ptr<Work> next = b.hook ? b.hook->next(*group_, b.flat) : nullptr;
  if (!next) return false;
  b.work = std::move(next);
  return true;
}

void Reducer::rebuild_from_rank0_order() {
  rebuilt_ = true;
  // ZeRO lays the optimizer's shards along the buckets, and only this rank's shard of
  // the gradients exists now: the buckets stay as built.
  if (options_.zero_stage > 0) return;
  // Rank 0's ready order this backward, broadcast; parameters never marked (unused)
  // follow in reverse registration order. Frozen parameters have no bucket and no place.
  std::vector<uint8_t> seen(params_.size(), 0);
  for (size_t idx = 0; idx < params_.size(); ++idx)
    if (bucket_of_[idx] == kNoBucket) seen[idx] = 1;
  const size_t trainable = static_cast<size_t>(std::count(seen.begin(), seen.end(), uint8_t{0}));
  // Nothing to order (a model without trainable parameters; every rank agrees, DDP
  // checked the parameters), and params_.front() below would not exist.
  if (trainable == 0) return;
  std::vector<int64_t> order(trainable);
  size_t n = 0;
  for (size_t idx : ready_order_) {
    order[n++] = static_cast<int64_t>(idx);
    seen[idx] = 1;
  }
  for (size_t idx = params_.size(); idx-- > 0;)
    if (!seen[idx]) order[n++] = static_cast<int64_t>(idx);
  if (options_.communicate && group_->size() > 1)
    host_broadcast(*group_, cpu_buffer(order.data(), static_cast<int64_t>(order.size())), 0,
                   params_.front()->value.device(), options_.timeout);
  std::vector<size_t> as_size(order.begin(), order.end());
  for (size_t idx : as_size)
    if (idx >= params_.size() || bucket_of_[idx] == kNoBucket)
      throw std::runtime_error("DDP: rank 0 sent an invalid bucket order (do the ranks freeze the same parameters?)");
  // Unchanged order (the usual case for sequential models): keep the buckets.
  std::vector<size_t> current;
  for (const Bucket& b : buckets_) current.insert(current.end(), b.params.begin(), b.params.end());
  if (current != as_size) build_buckets(as_size);
}

std::vector<GradReadyInfo> Reducer::grad_ready() const {
  std::vector<GradReadyInfo> out;
  if (timed_backwards_ == 0) return out;
  for (size_t idx : ready_order_) {
    const Parameter& p = *params_[idx];
    out.push_back({p.name, static_cast<int64_t>(p.value.nbytes()),
                   ready_sum_s_[idx] * 1e3 / static_cast<double>(timed_backwards_)});
  }
  return out;
}

std::vector<BucketInfo> Reducer::bucket_info() const {
  std::vector<BucketInfo> out;
  for (const Bucket& b : buckets_)
    out.push_back({b.numel * static_cast<int64_t>(dtype_size(b.flat.dtype())), static_cast<int64_t>(b.params.size()),
                   timed_backwards_ ? b.comm_sum_s * 1e3 / static_cast<double>(timed_backwards_) : 0.0});
  return out;
}

std::vector<BucketLayout> Reducer::layouts() const {
  std::vector<BucketLayout> out;
  for (const Bucket& b : buckets_) out.push_back({b.params, b.offsets, b.numel, b.flat.numel()});
  return out;
}

std::vector<std::vector<size_t>> Reducer::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

}  // namespace tandem
