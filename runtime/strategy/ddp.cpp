// DDP strategy: parameter agreement at construction, no-sync micro-steps, the reducer
// attached to the model's gradient-ready hook.
#include "runtime/strategy/ddp.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "runtime/cuda_device.h"
#include "runtime/kernels.h"
#include "runtime/host_collectives.h"
#include "runtime/strategy/replica_sync.h"
#include "runtime/strategy/single.h"
#include "runtime/timer.h"

namespace tandem {

uint64_t parameter_signature(const Parameter& p) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(p.name.data(), p.name.size());
  DType d = p.value.dtype();
  mix(&d, sizeof d);
  for (int64_t dim : p.value.shape()) mix(&dim, sizeof dim);
  const uint8_t trained = p.requires_grad ? 1 : 0;  // ranks must freeze the same parameters
  mix(&trained, 1);
  return h;
}

DdpStrategy::DdpStrategy(std::unique_ptr<Model> model, const OptimizerConfig& optim, Device device,
                         std::shared_ptr<ProcessGroup> group, ReducerOptions reducer_options, Tracer* tracer,
                         const LossFactory& make_loss)
    : model_(std::move(model)), group_(std::move(group)), device_(device), tracer_(tracer) {
  if (!group_) throw std::invalid_argument("DDP needs a process group");
  model_->to(device_);
  model_->set_tracer(tracer_);
  if (device_.is_cuda()) group_->use_compute_stream(cuda::compute_stream(device_.index));
  check_parameters_match();
  broadcast_parameters();
  reducer_ = std::make_unique<Reducer>(model_->parameters(), group_, reducer_options, tracer_);
  model_->set_grad_ready_hook([this](Parameter& p) {
    if (sync_) reducer_->mark_ready(p);
  });
  if (reducer_options.zero_stage > 0) {
    zero_ = std::make_unique<ZeroShards>(model_->parameters(), reducer_->layouts(), group_, optim,
                                         reducer_options.timeout, tracer_);
    model_->set_forward_pre_hook([this](Module& layer) { zero_->wait_for(layer); });
  } else {
    optimizer_ = make_optimizer(optim, model_->parameters());
  }
  set_loss(make_loss);
}

void DdpStrategy::set_loss(const LossFactory& make_loss) {
  loss_ = make_replica_loss(make_loss, {group_, device_});
  eval_loss_ = make_replica_loss(make_loss, {nullptr, device_});
}

Model& DdpStrategy::model() {
  if (zero_) zero_->wait_all();  // parameters still being gathered are not readable yet
  return *model_;
}

void DdpStrategy::with_full_optimizer(FullState access, const std::function<void(Optimizer&)>& fn) {
  if (!zero_) return fn(*optimizer_);
  std::unique_ptr<Optimizer> full = zero_->full_optimizer(access == FullState::read);
  fn(*full);
  if (access == FullState::write) zero_->load_from(*full);
}

void DdpStrategy::check_parameters_match() {
  const int world = group_->size();
  const auto& params = model_->parameters();
  std::vector<int64_t> counts(world);
  counts[group_->rank()] = static_cast<int64_t>(params.size());
  host_allgather(*group_, cpu_buffer(counts.data(), world), device_, group_->timeout());
  int64_t max_count = *std::max_element(counts.begin(), counts.end());
  std::vector<int64_t> sigs(static_cast<size_t>(max_count) * world, 0);
  for (size_t i = 0; i < params.size(); ++i)
    sigs[group_->rank() * max_count + i] = static_cast<int64_t>(parameter_signature(*params[i]));
  host_allgather(*group_, cpu_buffer(sigs.data(), static_cast<int64_t>(sigs.size())), device_, group_->timeout());
  for (int64_t i = 0; i < max_count; ++i) {
    std::vector<int> differ;
    for (int r = 1; r < world; ++r)
      if (sigs[r * max_count + i] != sigs[i] || (i >= counts[r]) != (i >= counts[0])) differ.push_back(r);
    if (differ.empty()) continue;
    std::ostringstream msg;
    msg << "DDP: ranks hold different parameters; the first difference is parameter #" << i << " (";
    if (i < static_cast<int64_t>(params.size()))
      msg << "on rank " << group_->rank() << ": '" << params[i]->name << "' " << shape_str(params[i]->value.shape())
          << " " << dtype_name(params[i]->value.dtype()) << (params[i]->requires_grad ? "" : ", frozen");
    else
      msg << "rank " << group_->rank() << " has only " << params.size() << " parameters";
    msg << "); ranks differing from rank 0:";
    for (int r : differ) msg << " " << r;
    msg << ". Every rank must build the same model (same --model and --hidden) and freeze the same parameters "
           "(--freeze).";
    throw std::runtime_error(msg.str());
  }
  // Buffers: the per-step broadcast coalesces them, so every rank must hold the same list.
  uint64_t h = 1469598103934665603ull;
  for (const ModuleBuffer* b : model_->buffers()) {
    Parameter as_param{b->name, b->value, Tensor(), false};
    h = (h ^ parameter_signature(as_param)) * 1099511628211ull;
  }
  std::vector<int64_t> bufs(world);
  bufs[group_->rank()] = static_cast<int64_t>(h);
  host_allgather(*group_, cpu_buffer(bufs.data(), world), device_, group_->timeout());
  std::ostringstream differ;
  for (int r = 1; r < world; ++r)
    if (bufs[r] != bufs[0]) differ << " " << r;
  if (!differ.str().empty())
    throw std::runtime_error("DDP: ranks hold different buffers (names, shapes or dtypes; this rank has " +
                             std::to_string(model_->buffers().size()) + "); ranks differing from rank 0:" +
                             differ.str() + ". Every rank must build the same model.");
}

void DdpStrategy::broadcast_parameters() {
  for (Parameter* p : model_->parameters()) tensor_broadcast(*group_, p->value, 0, group_->timeout());
  tandem::broadcast_buffers(*group_, *model_, 0, group_->timeout());  // replicas start identical, buffers too
}

int DdpStrategy::set_sync_batchnorm(bool on) {
  if (on && uneven_ == UnevenInputs::join)
    throw std::invalid_argument("DDP: SyncBatchNorm needs every rank to run every forward; uneven inputs "
                                "'join' lets a rank without data skip them");
  sync_batchnorm_ = on;
  return set_batchnorm_sync(*model_, on ? std::make_shared<GroupCrossReplicaSum>(group_, group_->timeout()) : nullptr);
}

void DdpStrategy::set_uneven_inputs(UnevenInputs policy) {
  if (policy == UnevenInputs::join && sync_batchnorm_)
    throw std::invalid_argument("DDP: uneven inputs 'join' cannot be used with SyncBatchNorm (a rank without data "
                                "would skip the statistics all-reduces the others wait in)");
  Strategy::set_uneven_inputs(policy);
}

void DdpStrategy::sync_buffers() {
  if (broadcast_buffers_ && group_->size() > 1) tandem::broadcast_buffers(*group_, *model_, 0, group_->timeout());
}

StepOutput DdpStrategy::forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) {
  // Uneven inputs: every rank's sample count first, so all agree on what this step is.
  std::vector<double> weights;
  if (uneven_ != UnevenInputs::off) {
    int64_t mine = 0;
    for (const Batch& b : micro_batches) mine += b.inputs.dim(0);
    const std::vector<int64_t> samples = per_rank(mine);
    int64_t total = 0;
    std::vector<int> out_of_data;
    for (int r = 0; r < static_cast<int>(samples.size()); ++r) {
      total += samples[r];
      if (samples[r] == 0) out_of_data.push_back(r);
    }
    if (total == 0) return StepOutput::finished();
    if (!out_of_data.empty() && uneven_ == UnevenInputs::throw_on_early_termination) {
      std::ostringstream msg;
      msg << "uneven inputs: rank" << (out_of_data.size() > 1 ? "s" : "");
      for (size_t i = 0; i < out_of_data.size(); ++i) msg << (i ? ", " : " ") << out_of_data[i];
      msg << " ran out of data at step " << steps_seen_ << " while " << (samples.size() - out_of_data.size())
          << " of " << samples.size() << " ranks still had batches (policy throw_on_early_termination)";
      throw std::runtime_error(msg.str());
    }
    ++steps_seen_;
    if (mine == 0) return shadow_backward(times);
    // Each rank's mean-loss gradient weighted by its share of the step's samples, times W
    // (the reducer averages): the mean over every sample seen. When every rank holds the
    // same count this is 1/K, which keeps the plain path's arithmetic.
    const bool even = std::all_of(samples.begin(), samples.end(), [&](int64_t n) { return n == samples[0]; });
    if (!even)
      for (const Batch& b : micro_batches)
        weights.push_back(static_cast<double>(group_->size()) * static_cast<double>(b.inputs.dim(0)) /
                          static_cast<double>(total));
  }
  // The first K-1 micro-batches accumulate locally (reducer detached: no_sync); the
  // last one's backward feeds the reducer, which overlaps the all-reduce with it.
  // ZeRO: the parameters' all-gathers of the last step are waited for per layer.
  // no_sync: every micro-batch detached, nothing reduced (the next synchronising call's
  // last micro-batch reduces what accumulated in the bucket views).
  if (zero_) zero_->begin_forward();
  const bool syncs = syncing();
  const bool fresh = begin_accumulation();
  StepOutput out = accumulate_micro_batches(
      *model_, *loss_, device_, micro_batches, times, fresh,
      [this, syncs](bool last) {
        sync_ = syncs && last;
        if (sync_) reducer_->prepare_for_backward();
      },
      weights);
  sync_ = false;
  if (!syncs) return out;
  reducer_->finalize_backward(times);
  sync_buffers();
  if (zero_) zero_->end_forward_backward(times);
  return out;
}

StepOutput DdpStrategy::shadow_backward(PhaseTimes& times) {
  // This rank has no batch: it reduces zeros, bucket by bucket as the others do, so its
  // gradients end as the others' average and its step keeps the replica identical.
  if (!syncing())
    throw std::logic_error("uneven inputs: a rank without batches cannot take part inside no_sync");
  if (zero_) zero_->begin_forward();
  if (begin_accumulation()) model_->zero_grad();
  reducer_->prepare_for_backward();
  const auto& params = model_->parameters();
  for (size_t i = params.size(); i-- > 0;) reducer_->mark_ready(*params[i]);
  reducer_->finalize_backward(times);
  sync_buffers();
  if (zero_) zero_->end_forward_backward(times);
  return StepOutput();
}

void DdpStrategy::step(float lr, PhaseTimes& times) {
  check_not_accumulating("step");
  Stopwatch sw(kernels_for(device_));
  if (zero_)
    zero_->step(lr);
  else
    optimizer_->step(lr);
  sw.lap(times, &PhaseTimes::optimizer_ms);
}

EvalResult DdpStrategy::evaluate(BatchSource& loader) {
  // Every rank evaluates the whole set: replicas are identical, so every rank reports
  // the same figures with no extra communication and bit-identical to single mode.
  return evaluate_model(model(), loader, device_, *eval_loss_, make_metrics());
}

double DdpStrategy::global_loss(double local_loss) {
  float v = static_cast<float>(local_loss);
  host_allreduce(*group_, cpu_buffer(&v, 1), ReduceOp::avg, device_, group_->timeout());
  return v;
}

std::optional<PowerSgdSummary> DdpStrategy::powersgd() const {
  if (!reducer_->powersgd()) return std::nullopt;
  return reducer_->powersgd()->summary();
}

TensorFile DdpStrategy::comm_hook_state() {
  if (!reducer_->powersgd()) return {};
  return reducer_->powersgd()->checkpoint_state(*group_, group_->timeout());
}

void DdpStrategy::load_comm_hook_state(const std::string& path, uint32_t crc32) {
  if (reducer_->powersgd()) reducer_->powersgd()->restore(path, crc32, group_->size(), group_->rank());
}

bool DdpStrategy::replicas_identical() {
  const int world = group_->size();
  std::vector<int64_t> sums(world);
  // Parameters and, while they are broadcast, buffers (without broadcast they differ by design).
  uint64_t sum = std::strtoull(parameter_checksum(model()).c_str(), nullptr, 16);
  if (broadcast_buffers_) sum ^= std::strtoull(buffer_checksum(*model_).c_str(), nullptr, 16) * 31;
  sums[group_->rank()] = static_cast<int64_t>(sum);
  host_allgather(*group_, cpu_buffer(sums.data(), world), device_, group_->timeout());
  for (int r = 1; r < world; ++r)
    if (sums[r] != sums[0]) return false;
  return true;
}

std::vector<int64_t> DdpStrategy::per_rank(int64_t local) {
  std::vector<int64_t> all(group_->size());
  all[group_->rank()] = local;
  host_allgather(*group_, cpu_buffer(all.data(), static_cast<int64_t>(all.size())), device_, group_->timeout());
  return all;
}

void DdpStrategy::barrier() { group_->barrier()->synchronize(group_->timeout()); }

}  // namespace tandem
