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
                                           std::vector<Device> devices)
    : replicas_(std::move(replicas)), devices_(std::move(devices)), pool_(static_cast<int>(replicas_.size())) {
  if (replicas_.empty() || replicas_.size() != devices_.size())
    throw std::invalid_argument("DataParallel needs one device per replica");
  for (size_t r = 0; r < replicas_.size(); ++r) replicas_[r]->to(devices_[r]);
  optimizer_ = make_optimizer(optim, replicas_[0]->parameters());
  broadcast_parameters();
}

void DataParallelStrategy::broadcast_parameters() {
  const auto& master = replicas_[0]->parameters();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    const auto& ps = replicas_[r]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i]->value.copy_from(master[i]->value);
  }
}

void DataParallelStrategy::reduce_add_gradients() {
  const auto& master = replicas_[0]->parameters();
  Kernels& k = kernels_for(devices_[0]);
  for (size_t r = 1; r < replicas_.size(); ++r) {
    const auto& ps = replicas_[r]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor g = ps[i]->grad.on(devices_[0]);
      k.axpy(master[i]->grad.f32(), g.f32(), g.numel(), 1.0f);
    }
  }
}

StepOutput DataParallelStrategy::forward_backward(std::span<const Batch> micro_batches, PhaseTimes& times) {
  const int n = replicas();
  Kernels& k0 = kernels_for(devices_[0]);
  Stopwatch sw(k0);
  replicas_[0]->zero_grad();
  // 1: parameters to every replica, once a step (micro-batches share them).
  broadcast_parameters();
  const double broadcast_ms = sw.lap_ms();  // nothing overlaps it: all exposed
  times.comm_ms += broadcast_ms;
  times.exposed_comm_ms += broadcast_ms;
  const float micro = static_cast<float>(micro_batches.size());
  double loss_sum = 0;
  for (const Batch& batch : micro_batches) {
    const int64_t rows = batch.inputs.dim(0);
    if (rows < n) throw std::invalid_argument("DataParallel: a batch of " + std::to_string(rows) +
                                              " samples cannot feed " + std::to_string(n) + " devices");
    // 2: the batch cut into contiguous chunks.
    std::vector<int64_t> begin(n + 1, 0);
    for (int r = 0; r < n; ++r) begin[r + 1] = begin[r] + rows / n + (r < rows % n ? 1 : 0);
    const int64_t per_sample = batch.inputs.numel() / rows;
    Shape sample_shape(batch.inputs.shape().begin() + 1, batch.inputs.shape().end());
    std::vector<Tensor> outputs(n);
    // 3: forward in parallel.
    pool_.run_all([&](int r) {
      if (devices_[r].is_cuda()) cuda::set_device(devices_[r].index);
      Shape s = sample_shape;
      s.insert(s.begin(), begin[r + 1] - begin[r]);
      Tensor x = batch.inputs.view(begin[r] * per_sample, s);
      outputs[r] = replicas_[r]->forward(x.on(devices_[r]));
    });
    // 4: gather the outputs on device 0, loss there. A replica's output rows follow its
    // samples' (an image: one row; a token sequence: one row per position), in order.
    const int64_t classes = outputs[0].dim(1);
    std::vector<int64_t> out_begin(n + 1, 0);
    for (int r = 0; r < n; ++r) out_begin[r + 1] = out_begin[r] + outputs[r].dim(0);
    Tensor logits = Tensor::empty({out_begin[n], classes}, DType::f32, devices_[0]);
    for (int r = 0; r < n; ++r) logits.view(out_begin[r] * classes, outputs[r].shape()).copy_from(outputs[r]);
    Tensor labels = batch.labels.on(devices_[0]);
    loss_sum += loss_.forward(logits, labels);
    Tensor dlogits = loss_.backward(1.0f / (static_cast<float>(out_begin[n]) * micro));
    times.forward_ms += sw.lap_ms();
    // 5-6: output gradients to every replica, backward in parallel.
    pool_.run_all([&](int r) {
      if (devices_[r].is_cuda()) cuda::set_device(devices_[r].index);
      Tensor dy = dlogits.view(out_begin[r] * classes, outputs[r].shape());
      if (r > 0) replicas_[r]->zero_grad();
      replicas_[r]->backward(dy.on(devices_[r]));
      // The lap below waits for device 0 only; each other device's backward ends here, so
      // it is not counted as the reduce-add's time.
      if (r > 0) kernels_for(devices_[r]).synchronize();
    });
    times.backward_ms += sw.lap_ms();
    // 7: reduce-add onto device 0.
    reduce_add_gradients();
    const double reduce_ms = sw.lap_ms();
    times.comm_ms += reduce_ms;
    times.exposed_comm_ms += reduce_ms;
  }
  return StepOutput(loss_sum / micro);
}

void DataParallelStrategy::step(float lr, PhaseTimes& times) {
  Stopwatch sw(kernels_for(devices_[0]));
  optimizer_->step(lr);
  times.optimizer_ms += sw.lap_ms();
}

EvalResult DataParallelStrategy::evaluate(BatchSource& loader) {
  return evaluate_model(*replicas_[0], loader, devices_[0]);
}

}  // namespace tandem
