// Staging for host_collectives.h.
#include "runtime/host_collectives.h"

#include <functional>

#include "runtime/allocator.h"

namespace tandem {
namespace {

using Op = std::function<std::shared_ptr<Work>(Buffer)>;

void on_host_data(ProcessGroup& group, Buffer host, Device device, std::chrono::milliseconds timeout, const Op& op) {
  if (group.takes(host.device)) {
    op(host)->synchronize(timeout);
    return;
  }
  Tensor staged = Tensor::empty({host.count}, host.dtype, device);
  device_copy(staged.raw(), device, host.data, host.device, host.bytes());
  op(buffer_of(staged))->synchronize(timeout);
  device_copy(host.data, host.device, staged.raw(), device, host.bytes());
}

}  // namespace

void host_allreduce(ProcessGroup& group, Buffer host, ReduceOp op, Device device, std::chrono::milliseconds timeout) {
  on_host_data(group, host, device, timeout, [&](Buffer b) { return group.allreduce(b, op); });
}

void host_allgather(ProcessGroup& group, Buffer host, Device device, std::chrono::milliseconds timeout) {
  on_host_data(group, host, device, timeout, [&](Buffer b) { return group.allgather(b); });
}

void host_broadcast(ProcessGroup& group, Buffer host, int root, Device device, std::chrono::milliseconds timeout) {
  on_host_data(group, host, device, timeout, [&](Buffer b) { return group.broadcast(b, root); });
}

void tensor_broadcast(ProcessGroup& group, Tensor& tensor, int root, std::chrono::milliseconds timeout) {
  if (group.takes(tensor.device())) {
    group.broadcast(buffer_of(tensor), root)->synchronize(timeout);
    return;
  }
  Tensor host = tensor.to(Device::cpu());
  group.broadcast(buffer_of(host), root)->synchronize(timeout);
  tensor.copy_from(host);
}

Tensor bucket_buffer(ProcessGroup& group, int64_t numel, DType dtype, Device device, bool shareable) {
  if (shareable && device.is_cpu() && group.size() > 1) {
    ProcessGroup::SharedBuffer buffer = group.allocate_shared_buffer(static_cast<size_t>(numel) * dtype_size(dtype));
    if (buffer.data) return Tensor::from_external(buffer.data, {numel}, dtype, device, std::move(buffer.owner));
  }
  return Tensor::empty({numel}, dtype, device);
}

}  // namespace tandem
