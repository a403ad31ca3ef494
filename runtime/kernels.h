// The device kernel interface. Every op a layer, optimizer or strategy needs is a
// method here; runtime/cpu/ implements it with OpenBLAS and plain loops, cuda/
// with cuBLAS and CUDA kernels. Model code never sees this: it calls runtime/ops.h,
// which checks shapes and devices and dispatches here (docs/architecture.md, "Device and ops").
//
// Conventions (the same for every method, as llm.c's launchers):
//   outputs first, then inputs, then sizes; pointers are device pointers of the
//   implementing device; every matrix is row-major and contiguous; `n` counts elements.
//   Methods named *_acc ADD into their output (gradients accumulate); others overwrite.
#pragma once

#include <cstdint>
#include <memory>

#include "tandem/runtime/tensor.h"

namespace tandem {

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual Device device() const = 0;

  // --- dense algebra -------------------------------------------------------------
  // C(M,N) = alpha * op(A) * op(B) + beta * C; op(A) is (M,K), op(B) is (K,N).
  virtual void gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                    bool trans_a, bool trans_b, float alpha, float beta) = 0;
  // The same product with A and B in bf16 (raw bits) and f32 products, accumulation and
  // C: autocast's matmul (runtime/precision.h). Every implementation computes the exact
  // products of the bf16 inputs and sums them in f32, so devices agree to f32 rounding.
  virtual void gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                         bool trans_a, bool trans_b, float alpha, float beta) = 0;
  // Optional: fp32 products (gemm, and every fp32 GEMM a kernel makes through the device's
  // BLAS) on TF32 tensor cores, i.e. operands rounded to a 10-bit mantissa and sums in f32
  // (tandem-train --tf32), or strict fp32 (the default). Returns whether TF32 is now on.
  // Only the CUDA device has a TF32 mode (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH); the others
  // stay strict fp32 and return false.
  virtual bool set_tf32(bool tf32) {
    (void)tf32;
    return false;
  }

  // --- elementwise -----------------------------------------------------------------
  virtual void fill(float* x, int64_t n, float value) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  virtual void scale(float* x, int64_t n, float alpha) = 0;                   // x *= alpha
  virtual void axpy(float* y, const float* x, int64_t n, float alpha) = 0;     // y += alpha*x
  virtual void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) = 0;
  virtual void sum_rows_acc(float* out, const float* x, int64_t rows, int64_t cols) = 0;
  // y(N,C,HW) += bias(C) broadcast; out(C) += sum over N and HW of x(N,C,HW)
  virtual void add_bias_channels(float* y, const float* bias, int64_t n, int64_t c, int64_t hw) = 0;
  virtual void sum_channels_acc(float* out, const float* x, int64_t n, int64_t c, int64_t hw) = 0;
  virtual void relu_forward(float* y, const float* x, int64_t n) = 0;
  virtual void relu_backward(float* dx, const float* dy, const float* y, int64_t n) = 0;
  // GELU, exact (erf) form as PyTorch's default.
  virtual void gelu_forward(float* y, const float* x, int64_t n) = 0;
  virtual void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) = 0;
  // Inverted dropout. mask[i] is 0 or 1/(1-p), drawn from a counter-based hash of
  // (seed, i), so CPU and CUDA produce the same mask for the same seed.
  virtual void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p,
                               uint64_t seed) = 0;
  virtual void mul(float* y, const float* a, const float* b, int64_t n) = 0;  // y = a*b

  // --- convolution and pooling -----------------------------------------------------
  // Images (N,C,H,W) -> columns (C*KH*KW, N*OH*OW), zero padding; column index
  // image*OH*OW + output pixel, so one GEMM covers the batch (N = 1: one image).
  virtual void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t kh, int64_t kw, int64_t stride, int64_t pad, int64_t oh,
                              int64_t ow) = 0;
  // Its adjoint: columns (C*KH*KW, N*OH*OW) ADDED into images (N,C,H,W); per pixel the
  // same additions in the same order as col2im_acc on that image.
  virtual void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h,
                                  int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                                  int64_t oh, int64_t ow) = 0;
  // dst (B, A, inner) = src (A, B, inner) with the two leading axes swapped; dst != src.
  // Conv2d's permutes between (OC, N, OH*OW) GEMM layout and NCHW.
  virtual void swap_leading(float* dst, const float* src, int64_t a, int64_t b, int64_t inner) = 0;
  // x (planes,H,W) -> y (planes,OH,OW); argmax holds the flat h*W+w index of each max.
  virtual void maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t planes, int64_t h,
                               int64_t w, int64_t k, int64_t stride, int64_t oh, int64_t ow) = 0;
  // dx (planes,H,W) is overwritten (zeroed, then scattered into).
  virtual void maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t planes,
                                int64_t h, int64_t w, int64_t oh, int64_t ow) = 0;

  // --- normalisation and loss ------------------------------------------------------
  // Per row of x (rows,cols): y = (x-mean)*rstd*gamma + beta; saves mean and rstd (rows).
  virtual void layernorm_forward(float* y, float* mean, float* rstd, const float* x,
                                 const float* gamma, const float* beta, int64_t rows, int64_t cols,
                                 float eps) = 0;
  // dx overwritten; dgamma and dbeta accumulated.
  virtual void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, const float* mean,
                                  const float* rstd, int64_t rows, int64_t cols) = 0;
  // Batch normalisation (runtime/layers/batchnorm.h): x (N, C, S), S the spatial size
  // (H*W; L or 1 for BatchNorm1d); statistics per channel over N and S. Per-channel sums
  // accumulate in double and the moments are derived in double, on the device: a CUDA
  // forward never waits for the host.
  // stats (2C + 1) = [sum x (C), sum x^2 (C), N*S], overwritten.
  virtual void batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s) = 0;
  // From stats (2C + 1), possibly summed over replicas (count = stats[2C]): mean (C) =
  // sum / count and invstd (C) = 1 / sqrt(var + eps), var = max(sumsq / count - mean^2, 0)
  // (biased); then running_mean, running_var (C) = (1 - momentum) * running + momentum *
  // (mean, var * count / (count - 1)) and num_batches_tracked (one i64) += 1, in place.
  virtual void batchnorm_train_moments(float* mean, float* invstd, float* running_mean, float* running_var,
                                       int64_t* num_batches_tracked, const float* stats, int64_t c, float eps,
                                       float momentum) = 0;
  // Evaluation: invstd (C) = 1 / sqrt(running_var (C) + eps).
  virtual void batchnorm_eval_invstd(float* invstd, const float* running_var, int64_t c, float eps) = 0;
  // y (N, C, S) = (x - mean) * invstd * weight + bias; weight, bias (C) null: 1 and 0.
  virtual void batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd,
                                 const float* weight, const float* bias, int64_t n, int64_t c, int64_t s) = 0;
  // sums (2C) = [sum dy (C), sum dy * xhat (C)], xhat = (x - mean) * invstd; overwritten.
  virtual void batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean,
                                       const float* invstd, int64_t n, int64_t c, int64_t s) = 0;
  // dx (N, C, S) = weight * invstd * (dy - sum_dy / M - xhat * sum_dy_xhat / M), overwritten;
  // sums (2C) as batchnorm_backward_sums gives them (possibly summed over replicas), M =
  // count[0] (a float on this device: forward's stats[2C]); weight null: 1.
  virtual void batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean,
                                     const float* invstd, const float* weight, const float* sums, const float* count,
                                     int64_t n, int64_t c, int64_t s) = 0;
  // probs = softmax(logits) per row; losses[r] = -log probs[r, labels[r]].
  virtual void softmax_xent_forward(float* probs, float* losses, const float* logits,
                                    const int32_t* labels, int64_t rows, int64_t classes) = 0;
  // dlogits = (probs - onehot(labels)) * scale.
  virtual void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels,
                                     int64_t rows, int64_t classes, float scale) = 0;
  // Regression losses over pred/logits and target (rows, cols), one loss per row: the mean
  // over the row's cols elements, so the mean of losses is torch's mean-reduction loss.
  // losses[r] = mean_c (pred - target)^2;  dpred = scale * 2 * (pred - target) / cols.
  virtual void mse_forward(float* losses, const float* pred, const float* target, int64_t rows,
                           int64_t cols) = 0;
  virtual void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows,
                            int64_t cols, float scale) = 0;
  // Binary cross-entropy on logits x, stable as torch.nn.BCEWithLogitsLoss: per element
  // max(x, 0) - x*t + log1p(exp(-|x|)); losses[r] = its mean over the row.
  // dlogits = scale * (sigmoid(x) - t) / cols.
  virtual void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows,
                                  int64_t cols) = 0;
  virtual void bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows,
                                   int64_t cols, float scale) = 0;
  // Number of rows whose argmax equals the label.
  virtual int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                int64_t classes) = 0;
  virtual double sum(const float* x, int64_t n) = 0;

  // --- transformer ------------------------------------------------------------------
  // out (N, C) = table (V, C) rows ids[0..N); every id is in [0, V) (the layer checks).
  virtual void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                                 int64_t c) = 0;
  // dtable (V, C) += dout (N, C) scattered by ids. Deterministic: each table row receives
  // its contributions in increasing n, on every device, so repeated ids add in one order.
  virtual void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                                      int64_t c, int64_t vocab) = 0;
  // Causal multi-head self-attention over a fused projection. qkv (B, T, 3C) holds q, k
  // and v side by side, each (B, T, NH, HS) with HS = C / NH. att (B, NH, T, T) receives
  // softmax(q k^T / sqrt(HS)) with row t masked past column t (those entries are 0);
  // out (B, T, C) = att v, heads concatenated along C.
  virtual void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                                 int64_t c, int64_t nh) = 0;
  // dqkv (B, T, 3C) is overwritten; datt (B, NH, T, T) is scratch. att is forward's.
  virtual void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                                  const float* att, int64_t b, int64_t t, int64_t c, int64_t nh) = 0;
  // The same attention, flash-style: tiles of queries against tiles of keys with an online
  // softmax (a running max and sum per row, the output rescaled as the max grows), so no
  // T x T buffer exists. out as attention_forward's (to float rounding); lse (B, NH, T)
  // receives each row's log-sum-exp of its scaled, causal scores, all backward needs to
  // rebuild a probability. fp32 throughout, on every device.
  virtual void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                                       int64_t nh) = 0;
  // dqkv (B, T, 3C) is overwritten; out and lse are forward's. Recomputes each probability
  // from q, k and lse: dv += p dout, ds = p (dout . v - dout . out), dq += ds k / sqrt(HS),
  // dk += ds q / sqrt(HS). Deterministic: fixed tiles, sums in a fixed order.
  virtual void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                                        const float* lse, int64_t b, int64_t t, int64_t c, int64_t nh) = 0;
  // The pieces of attention as batched products (runtime/batched_attention.h: how a GPU
  // runs attention_forward / attention_backward; the CPU has a fused kernel instead).
  // For i < batch: C_i (M, N) = alpha op(A_i) op(B_i) + beta C_i, where X_i = X + i * stride_x
  // (elements) and each matrix is as gemm's.
  virtual void gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                                    bool trans_a, bool trans_b, float alpha, float beta, int64_t batch,
                                    int64_t stride_a, int64_t stride_b, int64_t stride_c) = 0;
  // The same with bf16 operands and f32 products, sums and output, as gemm_bf16 (attention's
  // products under --precision bf16). The default runs gemm_bf16 once per matrix (the CPU's
  // path); a GPU overrides it with one batched call.
  virtual void gemm_strided_batched_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N,
                                         int64_t K, bool trans_a, bool trans_b, float alpha, float beta,
                                         int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
    for (int64_t i = 0; i < batch; ++i)
      gemm_bf16(C + i * stride_c, A + i * stride_a, B + i * stride_b, M, N, K, trans_a, trans_b, alpha, beta);
  }
  // heads (P, B, NH, T, HS) = x (B, T, P, NH, HS) with HS = C / NH: P = 3 parts for qkv,
  // 1 for an output; merge_heads is its inverse. Both overwrite; heads != x.
  virtual void split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c,
                           int64_t nh) = 0;
  virtual void merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c,
                           int64_t nh) = 0;
  // att (R, T) holds R = B * NH * T rows of scores; row r sees columns [0, r % T] only.
  // In place: softmax over those (max-subtracted), exact zeros past them, as attention_forward.
  virtual void causal_softmax_forward(float* att, int64_t rows, int64_t t) = 0;
  // In place in datt (R, T): dpre = att * (datt - sum_j datt * att) over each row's
  // causal prefix, zeros past it, as attention_backward.
  virtual void causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t) = 0;
  // GELU, tanh approximation (GPT-2's; torch.nn.GELU(approximate="tanh")).
  virtual void gelu_tanh_forward(float* y, const float* x, int64_t n) = 0;
  virtual void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) = 0;
  // out[0] += sum of x[i]^2, in double (one double on this device): summed over many
  // calls, the total hardly depends on how the elements were split between them.
  virtual void sum_squares_acc(double* out, const float* x, int64_t n) = 0;
  // Clip by global norm without a host read: x *= min(1, max_norm / (sqrt(s) + 1e-6)),
  // torch.nn.utils.clip_grad_norm_'s coefficient, in float, where s is the float of
  // sum_sq[0] + ... + sum_sq[parts - 1] added in double in that order (sum_sq on this
  // device: partial sums, e.g. one per rank).
  virtual void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm) = 0;

  // --- optimizers (one fused update per tensor) ------------------------------------
  // PyTorch SGD semantics: g = grad + wd*p; buf = momentum*buf + g (buf = g on the
  // first step); step = nesterov ? g + momentum*buf : buf; p -= lr*step.
  virtual void sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr,
                          float momentum, float weight_decay, bool nesterov, bool first_step) = 0;
  // PyTorch AdamW semantics (decoupled decay); `step` counts from 1.
  virtual void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay,
                            int64_t step) = 0;

  // --- many tensors per call (the optimizer's path) --------------------------------
  // One call over a list of tensors does what the single-tensor method does to each, in
  // list order, with the same result per element. The defaults here loop over the
  // single-tensor methods (the CPU's path: same bits); CUDA launches once per
  // kMultiTensorChunk tensors instead of once (or twice) per tensor.
  static constexpr int64_t kMultiTensorChunk = 128;
  struct Span {
    float* data;
    int64_t n;
  };
  // An optimizer's view of one tensor: slot0 is SGD's momentum buffer (null without
  // momentum) or AdamW's m, slot1 AdamW's v; weight_decay the decay that applies to it.
  struct UpdateSpan {
    float* param;
    float* slot0;
    float* slot1;
    const float* grad;
    int64_t n;
    float weight_decay;
  };
  // (Inline, as the whole interface: the CUDA plugin needs nothing of the runtime but
  // headers, docs/architecture.md.)
  // out[0] += sum of squares of every span (in double; the split hardly matters, as above).
  virtual void sum_squares_acc_multi(double* out, const Span* xs, int64_t count) {
    for (int64_t i = 0; i < count; ++i) sum_squares_acc(out, xs[i].data, xs[i].n);
  }
  virtual void clip_scale_multi(const Span* xs, int64_t count, const double* sum_sq, int64_t parts, float max_norm) {
    for (int64_t i = 0; i < count; ++i) clip_scale(xs[i].data, xs[i].n, sum_sq, parts, max_norm);
  }
  virtual void sgd_update_multi(const UpdateSpan* ts, int64_t count, float lr, float momentum, bool nesterov,
                                bool first_step) {
    for (int64_t i = 0; i < count; ++i)
      sgd_update(ts[i].param, ts[i].slot0, ts[i].grad, ts[i].n, lr, momentum, ts[i].weight_decay, nesterov,
                 first_step);
  }
  virtual void adamw_update_multi(const UpdateSpan* ts, int64_t count, float lr, float beta1, float beta2, float eps,
                                  int64_t step) {
    for (int64_t i = 0; i < count; ++i)
      adamw_update(ts[i].param, ts[i].slot0, ts[i].slot1, ts[i].grad, ts[i].n, lr, beta1, beta2, eps,
                   ts[i].weight_decay, step);
  }

  // --- dtype conversion (communication compression) --------------------------------
  // Round to nearest even.
  virtual void f32_to_f16(uint16_t* dst, const float* src, int64_t n) = 0;
  virtual void f16_to_f32(float* dst, const uint16_t* src, int64_t n) = 0;
  virtual void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) = 0;
  virtual void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) = 0;

  // Waits for every kernel issued on this device's compute stream (no-op on CPU).
  virtual void synchronize() = 0;

  // --- timing without stopping the device -----------------------------------------
  // A point in this device's compute-stream order: the host clock on the CPU, an event
  // on CUDA. elapsed_ms(from, to) waits for `to` alone (not for work queued after it),
  // so a step can mark its phases and read them once it is over, instead of
  // synchronising the device at every phase.
  struct TimeMark {
    virtual ~TimeMark() = default;
  };
  virtual std::shared_ptr<TimeMark> mark() = 0;
  virtual double elapsed_ms(const TimeMark& from, const TimeMark& to) = 0;

  // --- values read after the step -------------------------------------------------
  // sum(x) (n floats on this device, accumulated in double), queued now and read by
  // get(), which waits for that value alone. On the CPU it is computed at once; on
  // CUDA the step's loss reaches the host without stopping the device mid-step.
  struct PendingValue {
    virtual ~PendingValue() = default;
    virtual double get() = 0;
  };
  virtual std::shared_ptr<PendingValue> sum_later(const float* x, int64_t n) = 0;
};

// The kernels of `device`. Throws a clear error for CUDA in a build without it.
Kernels& kernels_for(Device device);

// Each device's kernels, declared here and defined where they are implemented: the CPU's
// in runtime/cpu/ (above this layer, so kernels_for names it without including it), the
// CUDA devices' through runtime/cuda_device.h.
namespace cpu {
Kernels& kernels();
}

// Threads OpenBLAS may use in this process (the caller decides; tandem-train passes
// --threads or the launcher's share of the cores).
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace tandem
