// Fused optimizer updates, one kernel per parameter tensor: SGD (momentum, Nesterov,
// weight decay) and AdamW, with PyTorch's single-tensor arithmetic.
// Invariant: AdamW spells every operation with an explicit round-to-nearest intrinsic,
// in the order of the CPU kernel's AVX2 body, which writes out its three FMAs
// (runtime/cpu/cpu_kernels_nn.cpp), so each element is bit-identical to the CPU update.
// SGD keeps the CPU's expression shapes (the compilers may fuse them alike; tests/gpu
// allows 1e-6 relative).
#include "runtime/cuda/launch.h"
#include "runtime/cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

__global__ void sgd_plain_kernel(float* __restrict__ param, const float* __restrict__ grad, int64_t n, float lr,
                                 float weight_decay) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float g = weight_decay != 0.f ? grad[i] + weight_decay * param[i] : grad[i];
    param[i] += -lr * g;
  }
}

__global__ void sgd_momentum_kernel(float* __restrict__ param, float* __restrict__ momentum_buf,
                                    const float* __restrict__ grad, int64_t n, float lr, float momentum,
                                    float weight_decay, bool nesterov, bool first_step) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float g = weight_decay != 0.f ? grad[i] + weight_decay * param[i] : grad[i];
    const float buf = first_step ? g : momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    const float step = nesterov ? g + momentum * buf : buf;
    param[i] += -lr * step;
  }
}

__global__ void adamw_kernel(float* __restrict__ param, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grad, int64_t n, AdamWScalars s) {
  // The CPU body's FMAs: m and v fuse their second product into the add, and the
  // decoupled decay param*decay fuses into the final subtraction. (Before the CPU wrote
  // them out, GCC fused exactly these; unfused, m differs by up to 1e5 ulp where it
  // cancels and param by up to ~200 ulp after five steps.)
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float g = grad[i];
    const float mi = __fmaf_rn(s.one_minus_beta1, g, __fmul_rn(s.beta1, m[i]));
    const float vi = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(s.beta2, v[i]));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    param[i] = __fmaf_rn(param[i], s.decay, -__fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
}

}  // namespace

void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step, cudaStream_t stream) {
  if (n <= 0) return;
  if (momentum == 0.f) {
    sgd_plain_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, n, lr, weight_decay);
    TANDEM_CUDA_CHECK_LAUNCH(sgd_plain_kernel);
    return;
  }
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, momentum_buf, grad, n, lr, momentum,
                                                              weight_decay, nesterov, first_step);
  TANDEM_CUDA_CHECK_LAUNCH(sgd_momentum_kernel);
}

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamWScalars& s,
                  cudaStream_t stream) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, m, v, grad, n, s);
  TANDEM_CUDA_CHECK_LAUNCH(adamw_kernel);
}

}  // namespace tandem::cuda::launch
