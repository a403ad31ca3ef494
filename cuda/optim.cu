// Fused optimizer updates: SGD (momentum, Nesterov, weight decay) and AdamW, with PyTorch's
// single-tensor arithmetic, one kernel per tensor or one per table of up to
// kMultiTensorChunk tensors (the optimizer's path: one launch for a whole GPT).
// Invariant: AdamW spells every operation with an explicit round-to-nearest intrinsic,
// in the order of the CPU kernel's AVX2 body, which writes out its three FMAs
// (runtime/cpu/cpu_kernels_nn.cpp), so each element is bit-identical to the CPU update.
// SGD keeps the CPU's expression shapes (the compilers may fuse them alike; tests/gpu
// allows 1e-6 relative).
#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

// One element of each update, shared by the per-tensor and the multi-tensor kernels.
__device__ __forceinline__ void sgd_element(float* __restrict__ param, float* __restrict__ momentum_buf,
                                            const float* __restrict__ grad, int64_t i, float lr, float momentum,
                                            float weight_decay, bool nesterov, bool first_step) {
  const float g = weight_decay != 0.f ? grad[i] + weight_decay * param[i] : grad[i];
  if (momentum == 0.f) {
    param[i] += -lr * g;
    return;
  }
  const float buf = first_step ? g : momentum * momentum_buf[i] + g;
  momentum_buf[i] = buf;
  const float step = nesterov ? g + momentum * buf : buf;
  param[i] += -lr * step;
}

// The CPU body's FMAs: m and v fuse their second product into the add, and the
// decoupled decay param*decay fuses into the final subtraction. (Before the CPU wrote
// them out, GCC fused exactly these; unfused, m differs by up to 1e5 ulp where it
// cancels and param by up to ~200 ulp after five steps.)
__device__ __forceinline__ void adamw_element(float* __restrict__ param, float* __restrict__ m,
                                              float* __restrict__ v, const float* __restrict__ grad, int64_t i,
                                              const AdamWScalars& s, float decay) {
  const float g = grad[i];
  const float mi = __fmaf_rn(s.one_minus_beta1, g, __fmul_rn(s.beta1, m[i]));
  const float vi = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(s.beta2, v[i]));
  m[i] = mi;
  v[i] = vi;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
  param[i] = __fmaf_rn(param[i], decay, -__fdiv_rn(__fmul_rn(s.step_size, mi), denom));
}

__global__ void sgd_kernel(float* __restrict__ param, float* __restrict__ momentum_buf,
                           const float* __restrict__ grad, int64_t n, float lr, float momentum, float weight_decay,
                           bool nesterov, bool first_step) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    sgd_element(param, momentum_buf, grad, i, lr, momentum, weight_decay, nesterov, first_step);
  }
}

__global__ void adamw_kernel(float* __restrict__ param, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grad, int64_t n, AdamWScalars s) {
  TANDEM_GRID_STRIDE_LOOP(i, n) adamw_element(param, m, v, grad, i, s, s.decay);
}

// Multi-tensor: grid.y picks the table's tensor, grid.x strides over its elements.
__global__ void sgd_multi_kernel(UpdateTable t, float lr, float momentum, bool nesterov, bool first_step) {
  const int k = blockIdx.y;
  TANDEM_GRID_STRIDE_LOOP(i, t.n[k]) {
    sgd_element(t.param[k], t.slot0[k], t.grad[k], i, lr, momentum, t.decay[k], nesterov, first_step);
  }
}

__global__ void adamw_multi_kernel(UpdateTable t, AdamWScalars s) {
  const int k = blockIdx.y;
  TANDEM_GRID_STRIDE_LOOP(i, t.n[k]) adamw_element(t.param[k], t.slot0[k], t.slot1[k], t.grad[k], i, s, t.decay[k]);
}

dim3 multi_grid(const int64_t* n, int count) {
  int64_t most = 0;
  for (int k = 0; k < count; ++k) most = n[k] > most ? n[k] : most;
  return dim3(blocks_for(most), static_cast<unsigned>(count));
}

}  // namespace

void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, momentum_buf, grad, n, lr, momentum, weight_decay,
                                                     nesterov, first_step);
  TANDEM_CUDA_CHECK_LAUNCH(sgd_kernel);
}

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamWScalars& s,
                  cudaStream_t stream) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, m, v, grad, n, s);
  TANDEM_CUDA_CHECK_LAUNCH(adamw_kernel);
}

void sgd_update_multi(const UpdateTable& t, float lr, float momentum, bool nesterov, bool first_step,
                      cudaStream_t stream) {
  if (t.count <= 0) return;
  sgd_multi_kernel<<<multi_grid(t.n, t.count), kThreads, 0, stream>>>(t, lr, momentum, nesterov, first_step);
  TANDEM_CUDA_CHECK_LAUNCH(sgd_multi_kernel);
}

void adamw_update_multi(const UpdateTable& t, const AdamWScalars& s, cudaStream_t stream) {
  if (t.count <= 0) return;
  adamw_multi_kernel<<<multi_grid(t.n, t.count), kThreads, 0, stream>>>(t, s);
  TANDEM_CUDA_CHECK_LAUNCH(adamw_multi_kernel);
}

}  // namespace tandem::cuda::launch
