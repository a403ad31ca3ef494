// The CPU Kernels class, shared by its translation units: cpu_kernels.cpp (BLAS,
// elementwise, dtype conversion), cpu_kernels_nn.cpp (convolution, pooling,
// normalisation, softmax cross-entropy, optimizers), cpu_kernels_loss.cpp (MSE and BCE
// with logits), cpu_kernels_batchnorm.cpp (batch normalisation) and
// cpu_kernels_transformer.cpp (embedding, attention, GELU-tanh, gradient clipping).
// Internal to runtime/cpu/: callers use tandem::cpu::kernels() or kernels_for(Device::cpu()).
// Each translation unit compiles this class into its level's namespace (cpu_isa_region.h):
// tandem::cpu::baseline::CpuKernels, and on x86-64 avx2:: and avx512:: as well.
// Invariant: every method follows kernels.h exactly (outputs first; *_acc adds, the rest
// overwrite) and keeps no state between calls, so one instance serves every thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "runtime/cpu/cpu_isa_region.h"
#include "runtime/kernels.h"

TANDEM_CPU_ISA_BEGIN

// The i-th draw of a splitmix64 stream seeded with `seed` (Steele et al. 2014), i.e. the
// finaliser applied to seed + (i+1) * golden gamma. Dropout draws its mask from it, so
// any device that evaluates the same function produces the same mask.
inline uint64_t splitmix64_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Sum of n floats in 16 independent float lanes: GCC vectorises it without reassociation
// flags, and the lanes keep the rounding error of long sums small.
inline float lane_sum(const float* __restrict x, int64_t n) {
  constexpr int L = 16;
  float acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int k = 0; k < L; ++k) acc[k] += x[i + k];
  float tail = 0.f;
  for (; i < n; ++i) tail += x[i];
  for (int k = 0; k < L; ++k) tail += acc[k];
  return tail;
}

class CpuKernels final : public Kernels {
 public:
  Device device() const override { return Device::cpu(); }

  void gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, float alpha, float beta) override;
  // The AVX512-BF16 kernel or the f32 fallback (bf16_gemm.h), whichever bf16_gemm_path() says.
  void gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K, bool trans_a,
                 bool trans_b, float alpha, float beta) override;

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
  void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p,
                       uint64_t seed) override;
  void mul(float* y, const float* a, const float* b, int64_t n) override;

  void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                      int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) override;
  void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w,
                          int64_t kh, int64_t kw, int64_t stride, int64_t pad, int64_t oh,
                          int64_t ow) override;
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
  void softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels,
                            int64_t rows, int64_t classes) override;
  void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int64_t rows,
                             int64_t classes, float scale) override;
  int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows,
                        int64_t classes) override;
  double sum(const float* x, int64_t n) override;

  // cpu_kernels_batchnorm.cpp
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

  // cpu_kernels_loss.cpp
  void mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols) override;
  void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols,
                    float scale) override;
  void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows,
                          int64_t cols) override;
  void bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows, int64_t cols,
                           float scale) override;

  // cpu_kernels_transformer.cpp
  void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c) override;
  void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                              int64_t vocab) override;
  void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                         int64_t nh) override;
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                          int64_t b, int64_t t, int64_t c, int64_t nh) override;
  void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                               int64_t nh) override;
  void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                                const float* lse, int64_t b, int64_t t, int64_t c, int64_t nh) override;
  void gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool trans_a,
                            bool trans_b, float alpha, float beta, int64_t batch, int64_t stride_a, int64_t stride_b,
                            int64_t stride_c) override;
  // Attention's per-head products under bf16: each operand widened to f32 once for all
  // matrices (exact), then gemm_strided_batched: per matrix, bit for bit gemm_bf16's
  // fallback path, which beats the native kernel at these small shapes (docs/precision.md).
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

  void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr,
                  float momentum, float weight_decay, bool nesterov, bool first_step) override;
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int64_t step) override;

  void f32_to_f16(uint16_t* dst, const float* src, int64_t n) override;
  void f16_to_f32(float* dst, const uint16_t* src, int64_t n) override;
  void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) override;
  void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) override;

  void synchronize() override {}

  struct HostMark final : TimeMark {
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  };
  std::shared_ptr<TimeMark> mark() override { return std::make_shared<HostMark>(); }

  struct ReadyValue final : PendingValue {
    double value = 0;
    double get() override { return value; }
  };
  std::shared_ptr<PendingValue> sum_later(const float* x, int64_t n) override {
    auto v = std::make_shared<ReadyValue>();
    v->value = sum(x, n);
    return v;
  }
  double elapsed_ms(const TimeMark& from, const TimeMark& to) override {
    return std::chrono::duration<double, std::milli>(static_cast<const HostMark&>(to).at -
                                                     static_cast<const HostMark&>(from).at)
        .count();
  }
};

TANDEM_CPU_ISA_END
