// The CUDA kernel launchers behind CudaKernels (cuda_kernels.h). One launcher per kernel,
// every one with the same shape as llm.c's: outputs, inputs, sizes, parameters, stream
// last. Pointers are device pointers on the stream's device; `n`, `rows`, `cols` count
// elements, never bytes. Launchers enqueue and return; they never synchronise, except
// where a result must reach the host (sum, count_correct), which the caller does.
//
// Which file holds what (forward and backward of a layer side by side, as llm.c):
//   elementwise.cu   fill, scale, axpy, mul, bias adds, relu, gelu, dropout, f16/bf16
//   reduce.cu        sum_rows_acc, sum_channels_acc, sum (double), count_correct
//   conv_pool.cu     im2col / col2im_acc (per image and batched), swap_leading,
//                    maxpool forward / backward
//   norm_loss.cu     layernorm forward / backward, softmax cross-entropy forward / backward
//                    MSE and BCE-with-logits forward / backward
//   optim.cu         sgd_update, adamw_update, and their multi-tensor forms
//
// Invariant: each kernel computes, element for element, the same formula as the CPU
// kernel of the same name (runtime/cpu/), in the same order where the CPU order is
// cheap to keep (col2im's per-pixel sum, maxpool's first maximum and its backward's sums,
// AdamW's arithmetic with the FMAs GCC makes of the CPU body). Where a reduction's order
// differs, tests/gpu states the tolerance.
// Host-only and C++17: this header never includes the C++20 runtime headers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda::launch {

// Written by a kernel that finds an argument it cannot honour (a label outside [0, C)),
// read by the host at the next synchronisation. Lives in mapped pinned memory.
struct DeviceError {
  int code;       // 0: none; 1: softmax_xent label out of range
  int label;      // the offending value
  int64_t row;    // where it was found
  int64_t limit;  // the bound it broke (classes)
};

// --- elementwise.cu -------------------------------------------------------------------
void fill(float* x, int64_t n, float value, cudaStream_t stream);
void scale(float* x, int64_t n, float alpha, cudaStream_t stream);
void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream);
void mul(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream);
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
void add_bias_channels(float* y, const float* bias, int64_t n, int64_t c, int64_t hw, cudaStream_t stream);
void relu_forward(float* y, const float* x, int64_t n, cudaStream_t stream);
void relu_backward(float* dx, const float* dy, const float* y, int64_t n, cudaStream_t stream);
void gelu_forward(float* y, const float* x, int64_t n, cudaStream_t stream);
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream);
// keep_scale is 1/(1-p) computed by the caller exactly as the CPU kernel does (0 for p == 1).
void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p, float keep_scale, uint64_t seed,
                     cudaStream_t stream);
void f32_to_f16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream);
void f16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream);
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream);
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream);

// --- reduce.cu ------------------------------------------------------------------------
// Column and channel sums go through `scratch` (partial sums, then one ordered pass), so
// they are deterministic: no float atomics. Scratch sizes in floats:
size_t sum_rows_scratch(int64_t rows, int64_t cols);
size_t sum_channels_scratch(int64_t n, int64_t c, int64_t hw);
void sum_rows_acc(float* out, const float* x, int64_t rows, int64_t cols, float* scratch, cudaStream_t stream);
void sum_channels_acc(float* out, const float* x, int64_t n, int64_t c, int64_t hw, float* scratch,
                      cudaStream_t stream);
// *result (device, one double) = sum of x in double; `scratch` holds sum_scratch() doubles.
size_t sum_scratch(int64_t n);
void sum(double* result, const float* x, int64_t n, double* scratch, cudaStream_t stream);
// *result (device, one int64) = rows whose first maximum sits at the label.
void count_correct(int64_t* result, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                   cudaStream_t stream);

// --- conv_pool.cu ---------------------------------------------------------------------
void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                    int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow, cudaStream_t stream);
void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                        int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow, cudaStream_t stream);
void swap_leading(float* dst, const float* src, int64_t a, int64_t b, int64_t inner, cudaStream_t stream);
void maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t planes, int64_t h, int64_t w, int64_t k,
                     int64_t stride, int64_t oh, int64_t ow, cudaStream_t stream);
void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t planes, int64_t h, int64_t w,
                      int64_t oh, int64_t ow, cudaStream_t stream);

// --- norm_loss.cu ---------------------------------------------------------------------
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream);
// dgamma/dbeta accumulate through `scratch` (layernorm_backward_scratch floats).
size_t layernorm_backward_scratch(int64_t rows, int64_t cols);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, float* scratch,
                        cudaStream_t stream);
void softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels, int64_t rows,
                          int64_t classes, DeviceError* error, cudaStream_t stream);
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int64_t rows,
                           int64_t classes, float scale, cudaStream_t stream);
void mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols,
                 cudaStream_t stream);
void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols, float scale,
                  cudaStream_t stream);
void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows, int64_t cols,
                        cudaStream_t stream);
void bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows, int64_t cols,
                         float scale, cudaStream_t stream);

// --- optim.cu -------------------------------------------------------------------------
void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);
// The scalars are computed by the caller exactly as the CPU kernel computes them.
struct AdamWScalars {
  float decay;          // 1 - lr * weight_decay
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float bc2_sqrt;       // sqrt(1 - beta2^step)
  float eps;
  float step_size;      // lr / (1 - beta1^step)
};
void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamWScalars& s,
                  cudaStream_t stream);

// --- multi-tensor (optim.cu, transformer.cu) --------------------------------------------
// Up to kMultiTensorChunk tensors per launch, their pointers in the kernel's arguments
// (CUDA 12.1+ takes up to 32 KiB of them; the update table is 5.6 KiB); grid.y picks the
// tensor. Entries [0, count) are used; the callers split longer lists.
constexpr int kMultiTensorChunk = 128;
struct UpdateTable {
  float* param[kMultiTensorChunk];
  float* slot0[kMultiTensorChunk];  // SGD's momentum buffer (null without momentum); AdamW's m
  float* slot1[kMultiTensorChunk];  // AdamW's v
  const float* grad[kMultiTensorChunk];
  int64_t n[kMultiTensorChunk];
  float decay[kMultiTensorChunk];   // SGD: its L2 weight decay; AdamW: 1 - lr * weight_decay (fused)
  int count;
};
struct SpanTable {
  float* x[kMultiTensorChunk];
  int64_t n[kMultiTensorChunk];
  int count;
};
void sgd_update_multi(const UpdateTable& t, float lr, float momentum, bool nesterov, bool first_step,
                      cudaStream_t stream);
// s.decay is unused: each tensor's is in the table.
void adamw_update_multi(const UpdateTable& t, const AdamWScalars& s, cudaStream_t stream);

}  // namespace tandem::cuda::launch
