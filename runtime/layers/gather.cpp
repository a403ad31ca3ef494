// The differentiable all-gather of gather.h: an all-gather forward, a reduce-scatter (sum)
// backward, staged through host memory where the backend does not take the tensors' device.
#include "runtime/layers/gather.h"

#include <sstream>
#include <stdexcept>
#include <vector>

#include "runtime/layers/layer_util.h"
#include "runtime/host_collectives.h"

namespace tandem {

namespace {

Shape with_rows(const Shape& shape, int64_t rows) {
  Shape out = shape;
  out[0] = rows;
  return out;
}

}  // namespace

void AllGatherRows::check_device(Device device) const {
  // Staging goes through host memory, so one of the two must be the backend's.
  if (!group_->takes(device) && !group_->takes(Device::cpu()))
    throw std::invalid_argument("AllGatherRows: " + group_->backend_name() + " does not take tensors on " +
                                device.str() + " (nccl: move them to the group's GPU)");
}

void AllGatherRows::check_same_shape(const Tensor& x) {
  // (rows, elements per row) of every rank, by rank: one small host all-gather.
  const int w = world();
  const int64_t rows = x.dim(0), per_row = rows == 0 ? 0 : x.numel() / rows;
  std::vector<int64_t> all(static_cast<size_t>(2 * w));
  all[2 * rank()] = rows;
  all[2 * rank() + 1] = per_row;
  host_allgather(*group_, cpu_buffer(all.data(), static_cast<int64_t>(all.size())), x.device(), group_->timeout());
  bool same = true;
  for (int r = 0; r < w; ++r) same = same && all[2 * r] == rows && all[2 * r + 1] == per_row;
  if (same) return;
  std::ostringstream msg;
  msg << "AllGatherRows: every rank must gather the same shape, got rows (elements per row) by rank:";
  for (int r = 0; r < w; ++r) msg << (r ? ", " : " ") << all[2 * r] << " (" << all[2 * r + 1] << ")";
  msg << " on " << group_->backend_name() << " (this is rank " << rank() << ")";
  throw std::invalid_argument(msg.str());
}

Tensor AllGatherRows::forward(const Tensor& x) {
  if (!x.defined() || x.ndim() < 1)
    throw std::invalid_argument("AllGatherRows: forward needs a defined tensor of shape (N, ...)");
  local_shape_ = x.shape();
  if (!group_) return x;
  dy_in_ = Tensor();  // the last backward's input: every op that read it is ordered before this one
  check_device(x.device());
  check_same_shape(x);
  const int w = world();
  const int64_t n = x.numel();
  const Device dev = x.device();
  const Shape all_shape = with_rows(x.shape(), x.dim(0) * w);
  Tensor out = reuse_buffer(gathered_, all_shape, dev, x.dtype());
  if (n == 0) return out;
  if (group_->takes(dev)) {
    out.view(rank() * n, x.shape()).copy_from(x);
    group_->allgather(buffer_of(out))->wait(group_->timeout());
    return out;
  }
  Tensor host = reuse_buffer(host_all_, all_shape, Device::cpu(), x.dtype());
  host.view(rank() * n, x.shape()).copy_from(x);
  group_->allgather(buffer_of(host))->synchronize(group_->timeout());
  out.copy_from(host);
  return out;
}

Tensor AllGatherRows::backward(const Tensor& dy) {
  if (local_shape_.empty()) throw std::logic_error("AllGatherRows: backward called without a forward");
  const int w = world();
  const Shape all_shape = with_rows(local_shape_, local_shape_[0] * w);
  if (!dy.defined() || dy.shape() != all_shape)
    throw std::invalid_argument("AllGatherRows: backward takes the gathered shape " + shape_str(all_shape) +
                                ", got " + (dy.defined() ? shape_str(dy.shape()) : std::string("undefined")));
  if (!group_) return dy;
  const Device dev = dy.device();
  check_device(dev);
  Tensor dx = reuse_buffer(grad_, local_shape_, dev, dy.dtype());
  if (dx.numel() == 0) return dx;
  if (group_->takes(dev)) {
    if (!dev.is_cpu()) dy_in_ = dy;  // a device backend reads it after wait() returns
    group_->reduce_scatter(buffer_of(dy), buffer_of(dx), ReduceOp::sum)->wait(group_->timeout());
    return dx;
  }
  Tensor host_in = reuse_buffer(host_all_, all_shape, Device::cpu(), dy.dtype());
  Tensor host_out = reuse_buffer(host_mine_, local_shape_, Device::cpu(), dy.dtype());
  host_in.copy_from(dy);
  group_->reduce_scatter(buffer_of(host_in), buffer_of(host_out), ReduceOp::sum)->synchronize(group_->timeout());
  dx.copy_from(host_out);
  return dx;
}

}  // namespace tandem
