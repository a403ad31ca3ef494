// Kernel dispatch by device, and the multi-tensor defaults (loops over the single-tensor
// methods).
#include "runtime/kernels.h"

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cuda_device.h"

namespace tandem {

Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu::kernels();
  return cuda::kernels(device.index);
}

void Kernels::sum_squares_acc_multi(double* out, const Span* xs, int64_t count) {
  for (int64_t i = 0; i < count; ++i) sum_squares_acc(out, xs[i].data, xs[i].n);
}

void Kernels::clip_scale_multi(const Span* xs, int64_t count, const double* sum_sq, int64_t parts, float max_norm) {
  for (int64_t i = 0; i < count; ++i) clip_scale(xs[i].data, xs[i].n, sum_sq, parts, max_norm);
}

void Kernels::sgd_update_multi(const UpdateSpan* ts, int64_t count, float lr, float momentum, bool nesterov,
                               bool first_step) {
  for (int64_t i = 0; i < count; ++i)
    sgd_update(ts[i].param, ts[i].slot0, ts[i].grad, ts[i].n, lr, momentum, ts[i].weight_decay, nesterov,
               first_step);
}

void Kernels::adamw_update_multi(const UpdateSpan* ts, int64_t count, float lr, float beta1, float beta2, float eps,
                                 int64_t step) {
  for (int64_t i = 0; i < count; ++i)
    adamw_update(ts[i].param, ts[i].slot0, ts[i].slot1, ts[i].grad, ts[i].n, lr, beta1, beta2, eps,
                 ts[i].weight_decay, step);
}

}  // namespace tandem
