// InfoNCE over the device kernels: per direction one GEMM for the logits, the fused softmax
// cross-entropy against global row indices, and two GEMMs back; the gathered side's
// gradient returns through AllGatherRows::backward.
#include "runtime/layers/info_nce.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

namespace {

constexpr const char* kKind = "InfoNce";

void check_embeddings(std::span<const Tensor> outputs) {
  if (outputs.size() < 2)
    throw std::invalid_argument(std::string(kKind) + ": reads outputs 0 and 1 (the two views' embeddings) but the " +
                                "model returned " + std::to_string(outputs.size()));
  const Tensor& q = outputs[0];
  check_tensor(kKind, "output 0 (q)", q, q.device());
  if (q.ndim() != 2 || q.dim(1) < 1) throw_shape_error(kKind, "output 0 (q)", "(N, D) with D >= 1", q.shape());
  check_tensor(kKind, "output 1 (k)", outputs[1], q.device());
  if (outputs[1].shape() != q.shape())
    throw_shape_error(kKind, "output 1 (k)", shape_str(q.shape()) + " to match output 0 (q)", outputs[1].shape());
}

}  // namespace

InfoNce::InfoNce(std::shared_ptr<ProcessGroup> group, InfoNceOptions options)
    : options_(options), gather_q_(group), gather_k_(std::move(group)) {
  if (!(options_.temperature > 0.f))
    throw std::invalid_argument("InfoNce: temperature must be > 0, got " + std::to_string(options_.temperature));
}

void InfoNce::forward_direction(Direction& d, const Tensor& a, const Tensor& b_all) {
  const int64_t n = a.dim(0), dim = a.dim(1), m = b_all.dim(0);
  const Device dev = a.device();
  Kernels& k = kernels_for(dev);
  reuse_buffer(d.probs, {n, m}, dev);
  reuse_buffer(d.losses, {n}, dev);
  // The logits go into dlogits, which backward overwrites anyway.
  Tensor logits = reuse_buffer(d.dlogits, {n, m}, dev);
  k.gemm(logits.f32(), a.f32(), b_all.f32(), n, m, dim, false, true, 1.0f / options_.temperature, 0.0f);
  k.softmax_xent_forward(d.probs.f32(), d.losses.f32(), logits.f32(), labels_.data<int32_t>(), n, m);
}

Tensor InfoNce::backward_direction(Direction& d, const Tensor& a, const Tensor& b_all, float scale, Tensor& da,
                                   bool accumulate) {
  const int64_t n = a.dim(0), dim = a.dim(1), m = b_all.dim(0);
  const float inv_t = 1.0f / options_.temperature;
  Kernels& k = kernels_for(a.device());
  k.softmax_xent_backward(d.dlogits.f32(), d.probs.f32(), labels_.data<int32_t>(), n, m, scale);
  // da (N, D) = dlogits (N, M) . B (M, D) / t
  k.gemm(da.f32(), d.dlogits.f32(), b_all.f32(), n, dim, m, false, false, inv_t, accumulate ? 1.0f : 0.0f);
  // dB (M, D) = dlogits^T (M, N) . a (N, D) / t
  Tensor dall = reuse_buffer(d.dall, {m, dim}, a.device());
  k.gemm(dall.f32(), d.dlogits.f32(), a.f32(), m, dim, n, true, false, inv_t, 0.0f);
  return dall;
}

LossSum InfoNce::forward(std::span<const Tensor> outputs, std::span<const Tensor> /*targets: none read*/) {
  saved_ = false;
  check_embeddings(outputs);
  const Tensor& q = outputs[0];
  const int64_t n = q.dim(0), dim = q.dim(1);
  const Device dev = q.device();
  Kernels& k = kernels_for(dev);
  // Let go of the last step's handles first, so every buffer below is reused.
  for (Tensor& g : grads_) g = Tensor();
  q_all_ = k_all_ = Tensor();
  reuse_buffer(q_, {n, dim}, dev).copy_from(q);
  reuse_buffer(k_, {n, dim}, dev).copy_from(outputs[1]);
  // Every rank gathers (checking that all hold the same shape) before any may throw below.
  k_all_ = gather_k_.forward(k_);
  if (options_.symmetric) q_all_ = gather_q_.forward(q_);
  if (n == 0) throw std::invalid_argument("InfoNce: needs at least one row, got " + shape_str(q.shape()));

  const int64_t first = static_cast<int64_t>(gather_k_.rank()) * n;
  if (!labels_.defined() || labels_.numel() != n || labels_first_ != first || !(labels_.device() == dev)) {
    Tensor host = Tensor::empty({n}, DType::i32, Device::cpu());
    for (int64_t i = 0; i < n; ++i) host.data<int32_t>()[i] = static_cast<int32_t>(first + i);
    labels_ = host.on(dev);
    labels_first_ = first;
  }

  forward_direction(qk_, q_, k_all_);
  std::shared_ptr<Kernels::PendingValue> sum;
  if (options_.symmetric) {
    forward_direction(kq_, k_, q_all_);
    Tensor losses = reuse_buffer(losses_, {n}, dev);
    k.copy(losses.f32(), qk_.losses.f32(), n);
    k.scale(losses.f32(), n, 0.5f);
    k.axpy(losses.f32(), kq_.losses.f32(), n, 0.5f);
    sum = k.sum_later(losses.f32(), n);
  } else {
    sum = k.sum_later(qk_.losses.f32(), n);
  }
  saved_ = true;
  return {std::move(sum), n};
}

std::span<const Tensor> InfoNce::backward(float scale) {
  if (!saved_) throw std::logic_error("InfoNce: backward called without a successful forward");
  for (Tensor& g : grads_) g = Tensor();
  const int64_t n = q_.dim(0), dim = q_.dim(1);
  const Device dev = q_.device();
  Tensor dq = reuse_buffer(dq_, {n, dim}, dev);
  if (!options_.symmetric) {
    const Tensor dk_all = backward_direction(qk_, q_, k_all_, scale, dq, false);
    grads_[0] = dq;
    grads_[1] = gather_k_.backward(dk_all);  // every rank's rows' share of this rank's k
    return grads_;
  }
  // Each direction carries half the row's loss.
  Tensor dk = reuse_buffer(dk_, {n, dim}, dev);
  const Tensor dk_all = backward_direction(qk_, q_, k_all_, 0.5f * scale, dq, false);
  const Tensor dq_all = backward_direction(kq_, k_, q_all_, 0.5f * scale, dk, false);
  Kernels& k = kernels_for(dev);
  const Tensor dk_mine = gather_k_.backward(dk_all);
  k.axpy(dk.f32(), dk_mine.f32(), dk.numel(), 1.0f);
  const Tensor dq_mine = gather_q_.backward(dq_all);
  k.axpy(dq.f32(), dq_mine.f32(), dq.numel(), 1.0f);
  grads_[0] = dq;
  grads_[1] = dk;
  return grads_;
}

}  // namespace tandem
