// The CUDA implementation of Kernels (runtime/kernels.h): cuBLAS for GEMM, the launchers
// of launch.h for everything else, all on the device's compute stream.
// Invariant: every method follows kernels.h exactly (outputs first; *_acc adds, the rest
// overwrite), matches the CPU kernel's semantics (tests/gpu compares them one by one),
// makes its device current on the calling thread, and never synchronises except where
// a value must reach the host (sum, count_correct, synchronize).
#pragma once

#include "runtime/kernels.h"

namespace tandem::cuda {

struct DeviceContext;

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(DeviceContext& ctx) : ctx_(ctx) {}
  Device device() const override;

  void gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, float alpha, float beta) override;
  // cublasGemmEx: bf16 A and B, f32 C and compute (tensor cores where the GPU has them).
  void gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K, bool trans_a,
                 bool trans_b, float alpha, float beta) override;
  // cublasSetMathMode on the device's handle: CUBLAS_TF32_TENSOR_OP_MATH or CUBLAS_DEFAULT_MATH.
  bool set_tf32(bool tf32) override;

  void fill(float* x, int64_t n, float value) override;
  void copy(float* dst, const float* src, int64_t n) override;
  void scale(float* x, int64_t n, float alpha) override;
  void axpy(float* y, const float* x, int64_t n, float alpha) override;
  void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) override;
  void sum_rows_acc(float* out, const float* x, int64_t rows, int64_t cols) override;
  void add_bias_channels(float* y, const float* bias, int64_t n, int64_t c, int64_t hw) override;
  void sum_channels_acc(float* out, const float* x, int64_t n, int64_t c, int64_t hw) override;
  void relu_forward(float* y, const float* x, int64_t n) override;
  void relu_backward(float* dx, const float* dy, const float* y, int64_t n) override;
  void gelu_forward(float* y, const float* x, int64_t n) override;
  void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) override;
  void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p, uint64_t seed) override;
  void mul(float* y, const float* a, const float* b, int64_t n) override;

  void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                      int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) override;
  void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                          int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) override;
  void swap_leading(float* dst, const float* src, int64_t a, int64_t b, int64_t inner) override;
  void maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t planes, int64_t h, int64_t w,
                       int64_t k, int64_t stride, int64_t oh, int64_t ow) override;
  void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t planes, int64_t h,
                        int64_t w, int64_t oh, int64_t ow) override;

  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                         const float* beta, int64_t rows, int64_t cols, float eps) override;
  void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                          const float* gamma, const float* mean, const float* rstd, int64_t rows,
                          int64_t cols) override;
  // batchnorm.cu
  void batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s) override;
  void batchnorm_train_moments(float* mean, float* invstd, float* running_mean, float* running_var,
                               int64_t* num_batches_tracked, const float* stats, int64_t c, float eps,
                               float momentum) override;
  void batchnorm_eval_invstd(float* invstd, const float* running_var, int64_t c, float eps) override;
  void batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd, const float* weight,
                         const float* bias, int64_t n, int64_t c, int64_t s) override;
  void batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean,
                               const float* invstd, int64_t n, int64_t c, int64_t s) override;
  void batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean, const float* invstd,
                             const float* weight, const float* sums, const float* count, int64_t n, int64_t c,
                             int64_t s) override;
  void softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels,
                            int64_t rows, int64_t classes) override;
  void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int64_t rows,
                             int64_t classes, float scale) override;
  void mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols) override;
  void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols,
                    float scale) override;
  void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows,
                          int64_t cols) override;
  void bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows, int64_t cols,
                           float scale) override;
  int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes) override;
  double sum(const float* x, int64_t n) override;

  void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c) override;
  void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                              int64_t vocab) override;
  void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                         int64_t nh) override;
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                          int64_t b, int64_t t, int64_t c, int64_t nh) override;
  // transformer.cu's flash-style kernels: a block of queries per (batch, head), K and V
  // tiles in shared memory, one thread per query row (out, dq) or key row (dk, dv). HS up
  // to 128.
  void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                               int64_t nh) override;
  void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                                const float* lse, int64_t b, int64_t t, int64_t c, int64_t nh) override;
  // The pieces attention_forward / attention_backward are made of (runtime/batched_attention.h):
  // cublasSgemmStridedBatched, and transformer.cu's permutes and causal softmax.
  void gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool trans_a,
                            bool trans_b, float alpha, float beta, int64_t batch, int64_t stride_a, int64_t stride_b,
                            int64_t stride_c) override;
  // cublasGemmStridedBatchedEx: bf16 operands, f32 output, CUBLAS_COMPUTE_32F (as gemm_bf16).
  void gemm_strided_batched_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                                 bool trans_a, bool trans_b, float alpha, float beta, int64_t batch,
                                 int64_t stride_a, int64_t stride_b, int64_t stride_c) override;
  void split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c,
                   int64_t nh) override;
  void merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c,
                   int64_t nh) override;
  void causal_softmax_forward(float* att, int64_t rows, int64_t t) override;
  void causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t) override;
  void gelu_tanh_forward(float* y, const float* x, int64_t n) override;
  void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) override;
  void sum_squares_acc(double* out, const float* x, int64_t n) override;
  void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm) override;

  void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr, float momentum,
                  float weight_decay, bool nesterov, bool first_step) override;
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step) override;

  // One launch per kMultiTensorChunk tensors (optim.cu, transformer.cu), two for the sum of squares.
  void sum_squares_acc_multi(double* out, const Span* xs, int64_t count) override;
  void clip_scale_multi(const Span* xs, int64_t count, const double* sum_sq, int64_t parts, float max_norm) override;
  void sgd_update_multi(const UpdateSpan* ts, int64_t count, float lr, float momentum, bool nesterov,
                        bool first_step) override;
  void adamw_update_multi(const UpdateSpan* ts, int64_t count, float lr, float beta1, float beta2, float eps,
                          int64_t step) override;

  void f32_to_f16(uint16_t* dst, const float* src, int64_t n) override;
  void f16_to_f32(float* dst, const uint16_t* src, int64_t n) override;
  void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) override;
  void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) override;

  void synchronize() override;
  std::shared_ptr<TimeMark> mark() override;
  double elapsed_ms(const TimeMark& from, const TimeMark& to) override;
  std::shared_ptr<PendingValue> sum_later(const float* x, int64_t n) override;

 private:
  DeviceContext& ctx_;
};

}  // namespace tandem::cuda
