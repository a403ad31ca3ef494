// DataParallel step: broadcast, scatter, parallel forward, gather + loss on device 0,
// scatter gradients, parallel backward, reduce-add onto device 0.
#include "runtime/strategy/data_parallel.h"

#include <stdexcept>

#include "runtime/cuda_device.h"
#include "runtime/kernels.h"
#include "runtime/strategy/single.h"
#include "runtime/timer.h"

namespace tandem {

DataParallelStrategy::DataParallelStrategy(std::vector<std::unique_ptr<Model>> replicas, const OptimizerConfig& optim,
                                           std::vector<Device> devices, const LossFactory& make_loss)
    : replicas_(std::move(replicas)), devices_(std::move(devices)), pool_(static_cast<int>(replicas_.size())) {
  if (replicas_.empty() || replicas_.size() != devices_.size())
    throw std::invalid_argument("DataParallel needs one device per replica");
  for (size_t r = 0; r < replicas_.size(); ++r) {
    replicas_[r]->to(devices_[r]);
    replicas_[r]->flatten_gradients();  // one zero fill, one copy and one add per replica
  }
  optimizer_ = make_optimizer(optim, replicas_[0]->parameters());
  broadcast_parameters();
  set_loss(make_loss);
}

void DataParallelStrategy::broadcast_parameters() {
  const auto& master = replicas_[0]->parameters();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    const auto& ps = replicas_[r]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i]->value.copy_from(master[i]->value);
    copy_buffers(*replicas_[r], *replicas_[0]);
  }
}

int DataParallelStrategy::set_sync_batchnorm(bool on, std::chrono::milliseconds timeout) {
  sync_ = on ? std::make_shared<ThreadCrossReplicaSum>(replicas(), timeout) : nullptr;
  int found = 0;
  for (int r = 0; r < replicas(); ++r)
    found = set_batchnorm_sync(*replicas_[r], sync_ ? sync_->participant(r) : nullptr);
  return found;
}

void DataParallelStrategy::run_replicas(const std::function<void(int)>& fn) {
  pool_.run_all([&](int r) {
    try {
      if (devices_[r].is_cuda()) cuda::set_device(devices_[r].index);
      fn(r);
    } catch (const std::exception& e) {
      if (sync_) sync_->cancel("replica " + std::to_string(r) + " failed: " + e.what());
      throw;
    }
  });
}

void DataParallelStrategy::reduce_add_gradients() {
  const auto& master = replicas_[0]->parameters();
  Kernels& k = kernels_for(devices_[0]);
  // Replica by replica, each one's flat gradient buffer at once: a copy to device 0 (its
  // stream ordered behind the replica's backward, cuda_device.h's copy) and one add. The
  // same additions in the same order as per parameter.
  if (replicas_[0]->flat_gradients_current()) {
    const Tensor& dst = replicas_[0]->flat_gradients();
    bool all = true;
    for (size_t r = 1; r < replicas_.size() && all; ++r) all = replicas_[r]->flat_gradients_current();
    if (all) {
      for (size_t r = 1; r < replicas_.size(); ++r) {
        Tensor g = replicas_[r]->flat_gradients().on(devices_[0]);
        k.axpy(dst.f32(), g.f32(), g.numel(), 1.0f);
      }
      return;
    }
  }
  for (size_t r = 1; r < replicas_.size(); ++r) {
    const auto& ps = replicas_[r]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor g = ps[i]->grad.on(devices_[0]);
      k.axpy(master[i]->grad.f32(), g.f32(), g.numel(), 1.0f);
    }
  }
}

namespace {

// Rows [begin, end) of a (rows, ...) tensor, as a view.
Tensor row_slice(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t per_row = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  Shape s = t.shape();
  s[0] = end - begin;
  return t.view(begin * per_row, s);
}

}  // namespace

StepOutput DataParallelStrategy::forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) {
  if (micro_batches.empty()) return StepOutput::finished();
  const int n = replicas();
  Kernels& k0 = kernels_for(devices_[0]);
  Stopwatch sw(k0);
  if (begin_accumulation()) replicas_[0]->zero_grad();
  // 1: parameters to every replica, once a step (micro-batches share them).
  broadcast_parameters();
  const double broadcast_ms = sw.lap_ms();  // nothing overlaps it: all exposed
  times.comm_ms += broadcast_ms;
  times.exposed_comm_ms += broadcast_ms;
  const float micro = static_cast<float>(micro_batches.size());
  StepOutput out;
  for (const Batch& batch : micro_batches) {
    const int64_t rows = batch.inputs.dim(0);
    if (rows < n) throw std::invalid_argument("DataParallel: a batch of " + std::to_string(rows) +
                                              " samples cannot feed " + std::to_string(n) + " devices");
    // 2: the batch cut into contiguous chunks.
    std::vector<int64_t> begin(n + 1, 0);
    for (int r = 0; r < n; ++r) begin[r + 1] = begin[r] + rows / n + (r < rows % n ? 1 : 0);
    std::vector<std::vector<Tensor>> outputs(n);
    // 3: forward in parallel.
    run_replicas([&](int r) {
      outputs[r] = replicas_[r]->forward_outputs(row_slice(batch.inputs, begin[r], begin[r + 1]).on(devices_[r]));
    });
    // 4: gather each output on device 0, the loss there over the whole batch. A replica's
    // output rows follow its samples' (an image: one row; a token sequence: one row per
    // position), in order.
    const size_t heads = outputs[0].size();
    std::vector<Tensor> gathered(heads);
    std::vector<std::vector<int64_t>> out_begin(heads, std::vector<int64_t>(n + 1, 0));
    for (size_t h = 0; h < heads; ++h) {
      for (int r = 0; r < n; ++r) {
        if (outputs[r].size() != heads || !outputs[r][h].defined() || outputs[r][h].ndim() < 1)
          throw std::invalid_argument("DataParallel: replica " + std::to_string(r) + " returned no output " +
                                      std::to_string(h) + " with a row dimension");
        out_begin[h][r + 1] = out_begin[h][r] + outputs[r][h].dim(0);
      }
      Shape shape = outputs[0][h].shape();
      shape[0] = out_begin[h][n];
      gathered[h] = Tensor::empty(shape, outputs[0][h].dtype(), devices_[0]);
      for (int r = 0; r < n; ++r)
        row_slice(gathered[h], out_begin[h][r], out_begin[h][r + 1]).copy_from(outputs[r][h]);
    }
    LossSum sum = loss_->forward(gathered, batch.targets_on(devices_[0]));
    const int64_t loss_rows = sum.rows;
    out.add(std::move(sum));
    std::span<const Tensor> douts = loss_->backward(1.0f / (static_cast<float>(loss_rows) * micro));
    times.forward_ms += sw.lap_ms();
    // 5-6: output gradients to every replica, backward in parallel.
    run_replicas([&](int r) {
      std::vector<Tensor> dy(heads);
      for (size_t h = 0; h < heads; ++h)
        if (h < douts.size() && douts[h].defined())
          dy[h] = row_slice(douts[h], out_begin[h][r], out_begin[h][r + 1]).on(devices_[r]);
      if (r > 0) replicas_[r]->zero_grad();
      replicas_[r]->backward_outputs(dy);
    });
    times.backward_ms += sw.lap_ms();  // device 0's backward; the others' finish inside the reduce below
    // 7: reduce-add onto device 0, each copy waiting on its replica's stream (no host wait).
    reduce_add_gradients();
    const double reduce_ms = sw.lap_ms();
    times.comm_ms += reduce_ms;
    times.exposed_comm_ms += reduce_ms;
  }
  return out;
}

void DataParallelStrategy::step(float lr, PhaseTimes& times) {
  check_not_accumulating("step");
  Stopwatch sw(kernels_for(devices_[0]));
  optimizer_->step(lr);
  times.optimizer_ms += sw.lap_ms();
}

EvalResult DataParallelStrategy::evaluate(BatchSource& loader) {
  return evaluate_model(*replicas_[0], loader, devices_[0], *loss_, make_metrics());
}

void DataParallelStrategy::set_loss(const LossFactory& make_loss) {
  // One loss, on device 0, over the gathered outputs of the whole batch.
  loss_ = make_replica_loss(make_loss, {nullptr, devices_[0]});
}

}  // namespace tandem
