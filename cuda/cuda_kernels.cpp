// CudaKernels: argument handling on the host, then one cuBLAS call or launcher per method.
// Scalars that the CPU kernels derive on the host (dropout's keep scale, AdamW's bias
// corrections) are derived here with the same expressions, so both devices feed their
// kernels identical floats.
#include "cuda/cuda_kernels.h"

#include <climits>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/batched_attention.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/launch.h"

namespace tandem::cuda {

namespace launch {
// transformer.cu: embedding, attention's head permutes and causal softmax, GELU-tanh, clipping by global norm.
void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c,
                       cudaStream_t stream);
// Sorts (id, position) pairs through `scratch` (embedding_backward_scratch bytes: three
// int32 arrays of n and CUB's radix-sort storage), then one warp per distinct id.
size_t embedding_backward_scratch(int64_t n, int64_t vocab);
void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                            int64_t vocab, void* scratch, cudaStream_t stream);
void split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c, int64_t nh,
                 cudaStream_t stream);
void merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c, int64_t nh,
                 cudaStream_t stream);
void causal_softmax_forward(float* att, int64_t rows, int64_t t, cudaStream_t stream);
// Flash-style attention (CudaKernels::attention_forward_tiled). Backward writes delta (B, NH, T
// floats of scratch: dout . out per row) first, then dq, then dk and dv.
constexpr int64_t kTiledAttentionMaxHs = 128;
constexpr int64_t kTiledAttentionMaxHeads = 65535;  // B * NH: grid.y
void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                             cudaStream_t stream);
void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* delta, int64_t b, int64_t t, int64_t c, int64_t nh, cudaStream_t stream);
void causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t, cudaStream_t stream);
void gelu_tanh_forward(float* y, const float* x, int64_t n, cudaStream_t stream);
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream);
// Multi-tensor forms over launch.h's SpanTable (sum_squares_multi_scratch doubles of scratch).
size_t sum_squares_multi_scratch(const SpanTable& t);
void sum_squares_acc_multi(double* out, const SpanTable& t, double* scratch, cudaStream_t stream);
void clip_scale_multi(const SpanTable& t, const double* sum_sq, int64_t parts, float max_norm, cudaStream_t stream);
// out[0] += sum of squares through `scratch` (sum_squares_scratch doubles): partials, then one ordered pass.
size_t sum_squares_scratch(int64_t n);
void sum_squares_acc(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream);
void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm, cudaStream_t stream);
// batchnorm.cu: batch normalisation. The per-channel sums go through `scratch`
// (batchnorm_sums_scratch doubles): partials, then one ordered pass per channel.
size_t batchnorm_sums_scratch(int64_t n, int64_t c, int64_t s);
void batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s, double* scratch,
                     cudaStream_t stream);
void batchnorm_train_moments(float* mean, float* invstd, float* running_mean, float* running_var,
                             int64_t* num_batches_tracked, const float* stats, int64_t c, float eps, float momentum,
                             cudaStream_t stream);
void batchnorm_eval_invstd(float* invstd, const float* running_var, int64_t c, float eps, cudaStream_t stream);
void batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd, const float* weight,
                       const float* bias, int64_t n, int64_t c, int64_t s, cudaStream_t stream);
void batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean, const float* invstd,
                             int64_t n, int64_t c, int64_t s, double* scratch, cudaStream_t stream);
void batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean, const float* invstd,
                           const float* weight, const float* sums, const float* count, int64_t n, int64_t c, int64_t s,
                           cudaStream_t stream);
}  // namespace launch

namespace {

int blas_dim(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " is outside the cuBLAS integer range");
  return static_cast<int>(v);
}

// Device scratch for one call, back to the cache when the call returns: the kernels that
// use it are queued on the compute stream ahead of any later user of the block.
class Scratch {
 public:
  Scratch(CachingAllocator& allocator, size_t bytes)
      : allocator_(allocator), ptr_(bytes ? allocator.allocate(bytes) : nullptr) {}
  ~Scratch() { allocator_.release(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  CachingAllocator& allocator_;
  void* ptr_;
};

// Both GEMMs' empty cases: nothing to do when C is empty; when K is 0 (which cuBLAS
// rejects as a zero leading dimension) the product is empty and C = beta*C. True when
// handled.
bool empty_product(CudaKernels& k, float* C, int64_t M, int64_t N, int64_t K, float beta) {
  if (M == 0 || N == 0) return true;
  if (K != 0) return false;
  if (beta == 0.f)
    k.fill(C, M * N, 0.f);
  else if (beta != 1.f)
    k.scale(C, M * N, beta);
  return true;
}

// A strided-batched product as cuBLAS sees it: gemm's operand swap (row-major C^T =
// op(B)^T op(A)^T), so cuBLAS's first operand is B. nullopt when cuBLAS has nothing to do
// (an empty batch or matrix; with K = 0 each C is scaled by beta here).
struct BatchedDims {
  int m, n, k, count, lda, ldb;
  cublasOperation_t op_b, op_a;
};
std::optional<BatchedDims> batched_dims(CudaKernels& kk, float* C, int64_t M, int64_t N, int64_t K, bool trans_a,
                                        bool trans_b, float beta, int64_t batch, int64_t stride_c) {
  if (batch <= 0 || M == 0 || N == 0) return std::nullopt;
  if (K == 0) {
    for (int64_t i = 0; i < batch; ++i) empty_product(kk, C + i * stride_c, M, N, K, beta);
    return std::nullopt;
  }
  BatchedDims d{blas_dim(M, "M"), blas_dim(N, "N"), blas_dim(K, "K"), blas_dim(batch, "batch"), 0, 0,
                trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N};
  d.lda = trans_a ? d.m : d.k;
  d.ldb = trans_b ? d.k : d.n;
  return d;
}

}  // namespace

Device CudaKernels::device() const { return Device::cuda(ctx_.device); }

// --- dense algebra -----------------------------------------------------------------

void CudaKernels::gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool trans_a,
                       bool trans_b, float alpha, float beta) {
  if (empty_product(*this, C, M, N, K, beta)) return;
  const int m = blas_dim(M, "M"), n = blas_dim(N, "N"), k = blas_dim(K, "K");
  ensure_current(ctx_.device);
  // cuBLAS is column-major: a row-major (R, C) matrix is its column-major transpose. So
  // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands,
  // keep each one's transpose flag. Leading dimensions are the row-major row lengths.
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  TANDEM_CUBLAS_CHECK(cublasSgemm(ctx_.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  n, m, k, &alpha, B, ldb, A, lda, &beta, C, n),
                      ctx_.device);
}

void CudaKernels::gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                            bool trans_a, bool trans_b, float alpha, float beta) {
  if (empty_product(*this, C, M, N, K, beta)) return;
  const int m = blas_dim(M, "M"), n = blas_dim(N, "N"), k = blas_dim(K, "K");
  ensure_current(ctx_.device);
  // The operand swap of gemm above; CUBLAS_COMPUTE_32F keeps products and sums in f32
  // (not the reduced-precision bf16 accumulation cuBLAS may otherwise pick).
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  TANDEM_CUBLAS_CHECK(cublasGemmEx(ctx_.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   n, m, k, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      ctx_.device);
}

bool CudaKernels::set_tf32(bool tf32) {
  ensure_current(ctx_.device);
  TANDEM_CUBLAS_CHECK(cublasSetMathMode(ctx_.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                      ctx_.device);
  return tf32;
}

// --- elementwise -------------------------------------------------------------------

void CudaKernels::fill(float* x, int64_t n, float value) {
  ensure_current(ctx_.device);
  launch::fill(x, n, value, ctx_.stream);
}

void CudaKernels::copy(float* dst, const float* src, int64_t n) {
  if (dst == src || n <= 0) return;
  ensure_current(ctx_.device);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const bool overlap = dst < src + n && src < dst + n;
  if (!overlap) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), ctx_.device);
    return;
  }
  // memmove semantics, as the CPU kernel: through a temporary block.
  Scratch tmp(ctx_.allocator, bytes);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(tmp.as<float>(), src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), ctx_.device);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, tmp.as<float>(), bytes, cudaMemcpyDeviceToDevice, ctx_.stream), ctx_.device);
}

void CudaKernels::scale(float* x, int64_t n, float alpha) {
  ensure_current(ctx_.device);
  launch::scale(x, n, alpha, ctx_.stream);
}

void CudaKernels::axpy(float* y, const float* x, int64_t n, float alpha) {
  ensure_current(ctx_.device);
  launch::axpy(y, x, n, alpha, ctx_.stream);
}

void CudaKernels::add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) {
  ensure_current(ctx_.device);
  launch::add_bias_rows(y, bias, rows, cols, ctx_.stream);
}

void CudaKernels::sum_rows_acc(float* out, const float* x, int64_t rows, int64_t cols) {
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::sum_rows_scratch(rows, cols) * sizeof(float));
  launch::sum_rows_acc(out, x, rows, cols, partial.as<float>(), ctx_.stream);
}

void CudaKernels::add_bias_channels(float* y, const float* bias, int64_t n, int64_t c, int64_t hw) {
  ensure_current(ctx_.device);
  launch::add_bias_channels(y, bias, n, c, hw, ctx_.stream);
}

void CudaKernels::sum_channels_acc(float* out, const float* x, int64_t n, int64_t c, int64_t hw) {
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::sum_channels_scratch(n, c, hw) * sizeof(float));
  launch::sum_channels_acc(out, x, n, c, hw, partial.as<float>(), ctx_.stream);
}

void CudaKernels::relu_forward(float* y, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  launch::relu_forward(y, x, n, ctx_.stream);
}

void CudaKernels::relu_backward(float* dx, const float* dy, const float* y, int64_t n) {
  ensure_current(ctx_.device);
  launch::relu_backward(dx, dy, y, n, ctx_.stream);
}

void CudaKernels::gelu_forward(float* y, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  launch::gelu_forward(y, x, n, ctx_.stream);
}

void CudaKernels::gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  launch::gelu_backward(dx, dy, x, n, ctx_.stream);
}

void CudaKernels::dropout_forward(float* y, float* mask, const float* x, int64_t n, float p, uint64_t seed) {
  ensure_current(ctx_.device);
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;  // as the CPU kernel: p == 1 drops all
  launch::dropout_forward(y, mask, x, n, p, keep_scale, seed, ctx_.stream);
}

void CudaKernels::mul(float* y, const float* a, const float* b, int64_t n) {
  ensure_current(ctx_.device);
  launch::mul(y, a, b, n, ctx_.stream);
}

// --- convolution and pooling ---------------------------------------------------------

void CudaKernels::im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t kh, int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) {
  ensure_current(ctx_.device);
  launch::im2col_batched(col, img, n, c, h, w, kh, kw, stride, pad, oh, ow, ctx_.stream);
}

void CudaKernels::col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w,
                                     int64_t kh, int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) {
  ensure_current(ctx_.device);
  launch::col2im_batched_acc(img, col, n, c, h, w, kh, kw, stride, pad, oh, ow, ctx_.stream);
}

void CudaKernels::swap_leading(float* dst, const float* src, int64_t a, int64_t b, int64_t inner) {
  ensure_current(ctx_.device);
  launch::swap_leading(dst, src, a, b, inner, ctx_.stream);
}

void CudaKernels::maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t planes, int64_t h, int64_t w,
                                  int64_t k, int64_t stride, int64_t oh, int64_t ow) {
  if (h * w > INT32_MAX) throw std::invalid_argument("maxpool_forward: plane too large for i32 argmax");
  ensure_current(ctx_.device);
  launch::maxpool_forward(y, argmax, x, planes, h, w, k, stride, oh, ow, ctx_.stream);
}

void CudaKernels::maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t planes, int64_t h,
                                   int64_t w, int64_t oh, int64_t ow) {
  ensure_current(ctx_.device);
  launch::maxpool_backward(dx, dy, argmax, planes, h, w, oh, ow, ctx_.stream);
}

// --- normalisation and loss ----------------------------------------------------------

void CudaKernels::layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                    const float* beta, int64_t rows, int64_t cols, float eps) {
  ensure_current(ctx_.device);
  launch::layernorm_forward(y, mean, rstd, x, gamma, beta, rows, cols, eps, ctx_.stream);
}

void CudaKernels::layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                     const float* gamma, const float* mean, const float* rstd, int64_t rows,
                                     int64_t cols) {
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::layernorm_backward_scratch(rows, cols) * sizeof(float));
  launch::layernorm_backward(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols, partial.as<float>(),
                             ctx_.stream);
}

// --- batch normalisation ---------------------------------------------------------------

namespace {
void check_batchnorm_channels(const char* what, int64_t c) {
  // One block per channel on the grid's x axis.
  if (c > INT_MAX)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(c) + " channels exceed the grid");
}
}  // namespace

void CudaKernels::batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s) {
  check_batchnorm_channels("batchnorm_stats", c);
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::batchnorm_sums_scratch(n, c, s) * sizeof(double));
  launch::batchnorm_stats(stats, x, n, c, s, partial.as<double>(), ctx_.stream);
}

void CudaKernels::batchnorm_train_moments(float* mean, float* invstd, float* running_mean, float* running_var,
                                          int64_t* num_batches_tracked, const float* stats, int64_t c, float eps,
                                          float momentum) {
  ensure_current(ctx_.device);
  launch::batchnorm_train_moments(mean, invstd, running_mean, running_var, num_batches_tracked, stats, c, eps,
                                  momentum, ctx_.stream);
}

void CudaKernels::batchnorm_eval_invstd(float* invstd, const float* running_var, int64_t c, float eps) {
  ensure_current(ctx_.device);
  launch::batchnorm_eval_invstd(invstd, running_var, c, eps, ctx_.stream);
}

void CudaKernels::batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd,
                                    const float* weight, const float* bias, int64_t n, int64_t c, int64_t s) {
  ensure_current(ctx_.device);
  launch::batchnorm_forward(y, x, mean, invstd, weight, bias, n, c, s, ctx_.stream);
}

void CudaKernels::batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean,
                                          const float* invstd, int64_t n, int64_t c, int64_t s) {
  check_batchnorm_channels("batchnorm_backward_sums", c);
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::batchnorm_sums_scratch(n, c, s) * sizeof(double));
  launch::batchnorm_backward_sums(sums, dy, x, mean, invstd, n, c, s, partial.as<double>(), ctx_.stream);
}

void CudaKernels::batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean,
                                        const float* invstd, const float* weight, const float* sums,
                                        const float* count, int64_t n, int64_t c, int64_t s) {
  ensure_current(ctx_.device);
  launch::batchnorm_backward_dx(dx, dy, x, mean, invstd, weight, sums, count, n, c, s, ctx_.stream);
}

void CudaKernels::softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels,
                                       int64_t rows, int64_t classes) {
  ensure_current(ctx_.device);
  launch::softmax_xent_forward(probs, losses, logits, labels, rows, classes, ctx_.error_device, ctx_.stream);
  // A bad label cannot throw from the kernel: its record follows the kernel to the host,
  // and the next synchronisation (the loss's sum(), at the latest) throws it.
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(ctx_.error_host, ctx_.error_device, sizeof(launch::DeviceError),
                                    cudaMemcpyDeviceToHost, ctx_.stream),
                    ctx_.device);
}

void CudaKernels::softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int64_t rows,
                                        int64_t classes, float scale) {
  ensure_current(ctx_.device);
  launch::softmax_xent_backward(dlogits, probs, labels, rows, classes, scale, ctx_.stream);
}

void CudaKernels::mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols) {
  ensure_current(ctx_.device);
  launch::mse_forward(losses, pred, target, rows, cols, ctx_.stream);
}

void CudaKernels::mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols,
                               float scale) {
  ensure_current(ctx_.device);
  launch::mse_backward(dpred, pred, target, rows, cols, scale, ctx_.stream);
}

void CudaKernels::bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows,
                                     int64_t cols) {
  ensure_current(ctx_.device);
  launch::bce_logits_forward(losses, logits, target, rows, cols, ctx_.stream);
}

void CudaKernels::bce_logits_backward(float* dlogits, const float* logits, const float* target, int64_t rows,
                                      int64_t cols, float scale) {
  ensure_current(ctx_.device);
  launch::bce_logits_backward(dlogits, logits, target, rows, cols, scale, ctx_.stream);
}

int64_t CudaKernels::count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes) {
  ensure_current(ctx_.device);
  Scratch result(ctx_.allocator, sizeof(int64_t));
  launch::count_correct(result.as<int64_t>(), logits, labels, rows, classes, ctx_.stream);
  std::lock_guard<std::mutex> lock(ctx_.scalar_mutex);
  ctx_.download(ctx_.host_scalars, result.as<int64_t>(), sizeof(int64_t));
  return *static_cast<const int64_t*>(ctx_.host_scalars);
}

double CudaKernels::sum(const float* x, int64_t n) {
  ensure_current(ctx_.device);
  Scratch scratch(ctx_.allocator, (launch::sum_scratch(n) + 1) * sizeof(double));
  double* result = scratch.as<double>();
  launch::sum(result, x, n, result + 1, ctx_.stream);
  std::lock_guard<std::mutex> lock(ctx_.scalar_mutex);
  ctx_.download(ctx_.host_scalars, result, sizeof(double));
  return *static_cast<const double*>(ctx_.host_scalars);
}

// --- transformer ---------------------------------------------------------------------

void CudaKernels::embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c) {
  ensure_current(ctx_.device);
  launch::embedding_forward(out, table, ids, n, c, ctx_.stream);
}

void CudaKernels::embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                                         int64_t vocab) {
  if (n <= 0 || c <= 0) return;
  if (n > INT_MAX || vocab > INT_MAX)
    throw std::invalid_argument("embedding_backward_acc: N = " + std::to_string(n) + " or V = " +
                                std::to_string(vocab) +
                                " is outside the int32 range of its sort");
  ensure_current(ctx_.device);
  Scratch scratch(ctx_.allocator, launch::embedding_backward_scratch(n, vocab));
  launch::embedding_backward_acc(dtable, dout, ids, n, c, vocab, scratch.as<void>(), ctx_.stream);
}

namespace {
void check_attention_shape(const char* what, int64_t c, int64_t nh) {
  if (nh <= 0 || c <= 0 || c % nh != 0)
    throw std::invalid_argument(std::string(what) + ": C = " + std::to_string(c) +
                                " is not a positive multiple of NH = " +
                                std::to_string(nh));
}
}  // namespace

// Attention as batched GEMMs and two row kernels (runtime/batched_attention.h), scratch
// from the caching allocator: back in the cache when the call returns, behind the stream.
void CudaKernels::attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                                    int64_t nh) {
  check_attention_shape("attention_forward", c, nh);
  Scratch scratch(ctx_.allocator, batched_attention_scratch(b, t, c, nh, false) * sizeof(float));
  batched_attention_forward(*this, out, att, qkv, scratch.as<float>(), b, t, c, nh);
}

void CudaKernels::attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                                     int64_t b, int64_t t, int64_t c, int64_t nh) {
  check_attention_shape("attention_backward", c, nh);
  Scratch scratch(ctx_.allocator, batched_attention_scratch(b, t, c, nh, true) * sizeof(float));
  batched_attention_backward(*this, dqkv, datt, dout, qkv, att, scratch.as<float>(), b, t, c, nh);
}

namespace {
void check_tiled_attention(const char* what, int64_t b, int64_t c, int64_t nh) {
  check_attention_shape(what, c, nh);
  if (c / nh > launch::kTiledAttentionMaxHs)
    throw std::invalid_argument(std::string(what) + ": head size C / NH = " + std::to_string(c / nh) +
                                " is over the CUDA kernel's " + std::to_string(launch::kTiledAttentionMaxHs) +
                                " (use more heads, or --attention materialized)");
  if (b * nh > launch::kTiledAttentionMaxHeads)
    throw std::invalid_argument(std::string(what) + ": B * NH = " + std::to_string(b * nh) + " is over " +
                                std::to_string(launch::kTiledAttentionMaxHeads) + " (CUDA's grid.y)");
}
}  // namespace

void CudaKernels::attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                                          int64_t nh) {
  check_tiled_attention("attention_forward_tiled", b, c, nh);
  ensure_current(ctx_.device);
  launch::attention_forward_tiled(out, lse, qkv, b, t, c, nh, ctx_.stream);
}

void CudaKernels::attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                                           const float* lse, int64_t b, int64_t t, int64_t c, int64_t nh) {
  check_tiled_attention("attention_backward_tiled", b, c, nh);
  ensure_current(ctx_.device);
  Scratch delta(ctx_.allocator, static_cast<size_t>(b * nh * t) * sizeof(float));
  launch::attention_backward_tiled(dqkv, dout, qkv, out, lse, delta.as<float>(), b, t, c, nh, ctx_.stream);
}

void CudaKernels::gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                                       bool trans_a, bool trans_b, float alpha, float beta, int64_t batch,
                                       int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  const auto d = batched_dims(*this, C, M, N, K, trans_a, trans_b, beta, batch, stride_c);
  if (!d) return;
  ensure_current(ctx_.device);
  TANDEM_CUBLAS_CHECK(cublasSgemmStridedBatched(ctx_.cublas, d->op_b, d->op_a, d->n, d->m, d->k, &alpha, B, d->ldb,
                                                stride_b, A, d->lda, stride_a, &beta, C, d->n, stride_c, d->count),
                      ctx_.device);
}

// gemm_bf16's types (bf16 operands, f32 products, sums and output).
void CudaKernels::gemm_strided_batched_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N,
                                            int64_t K, bool trans_a, bool trans_b, float alpha, float beta,
                                            int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  const auto d = batched_dims(*this, C, M, N, K, trans_a, trans_b, beta, batch, stride_c);
  if (!d) return;
  ensure_current(ctx_.device);
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx_.cublas, d->op_b, d->op_a, d->n, d->m, d->k, &alpha, B,
                                                 CUDA_R_16BF, d->ldb, stride_b, A, CUDA_R_16BF, d->lda, stride_a,
                                                 &beta, C, CUDA_R_32F, d->n, stride_c, d->count, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT),
                      ctx_.device);
}

void CudaKernels::split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c,
                              int64_t nh) {
  check_attention_shape("split_heads", c, nh);
  ensure_current(ctx_.device);
  launch::split_heads(heads, x, parts, b, t, c, nh, ctx_.stream);
}

void CudaKernels::merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c,
                              int64_t nh) {
  check_attention_shape("merge_heads", c, nh);
  ensure_current(ctx_.device);
  launch::merge_heads(x, heads, parts, b, t, c, nh, ctx_.stream);
}

void CudaKernels::causal_softmax_forward(float* att, int64_t rows, int64_t t) {
  ensure_current(ctx_.device);
  launch::causal_softmax_forward(att, rows, t, ctx_.stream);
}

void CudaKernels::causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t) {
  ensure_current(ctx_.device);
  launch::causal_softmax_backward(datt, att, rows, t, ctx_.stream);
}

void CudaKernels::gelu_tanh_forward(float* y, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  launch::gelu_tanh_forward(y, x, n, ctx_.stream);
}

void CudaKernels::gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  launch::gelu_tanh_backward(dx, dy, x, n, ctx_.stream);
}

void CudaKernels::sum_squares_acc(double* out, const float* x, int64_t n) {
  ensure_current(ctx_.device);
  Scratch partial(ctx_.allocator, launch::sum_squares_scratch(n) * sizeof(double));
  launch::sum_squares_acc(out, x, n, partial.as<double>(), ctx_.stream);
}

void CudaKernels::clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm) {
  ensure_current(ctx_.device);
  launch::clip_scale(x, n, sum_sq, parts, max_norm, ctx_.stream);
}

// --- optimizers ----------------------------------------------------------------------

void CudaKernels::sgd_update(float* param, float* momentum_buf, const float* grad, int64_t n, float lr,
                             float momentum, float weight_decay, bool nesterov, bool first_step) {
  if (momentum != 0.f && momentum_buf == nullptr)
    throw std::invalid_argument("sgd_update: momentum != 0 needs a buffer");
  ensure_current(ctx_.device);
  launch::sgd_update(param, momentum_buf, grad, n, lr, momentum, weight_decay, nesterov, first_step, ctx_.stream);
}

namespace {
// The CPU kernel's host arithmetic, expression for expression (torch.optim.AdamW's
// single-tensor path: bias corrections in double, rounded to float where they meet tensors).
launch::AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  if (step < 1) throw std::invalid_argument("adamw_update: step counts from 1, got " + std::to_string(step));
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  launch::AdamWScalars s;
  s.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.decay = std::fma(-lr, weight_decay, 1.f);  // the CPU kernel's rounding, bit for bit
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_minus_beta1 = 1.f - beta1;
  s.one_minus_beta2 = 1.f - beta2;
  s.eps = eps;
  return s;
}

// Fills `t` with entries [first, first + count) of `xs` (count <= kMultiTensorChunk).
void fill_table(launch::SpanTable& t, const Kernels::Span* xs, int64_t count) {
  t.count = static_cast<int>(count);
  for (int64_t i = 0; i < count; ++i) t.x[i] = xs[i].data, t.n[i] = xs[i].n;
}

void fill_table(launch::UpdateTable& t, const Kernels::UpdateSpan* ts, int64_t count) {
  t.count = static_cast<int>(count);
  for (int64_t i = 0; i < count; ++i) {
    t.param[i] = ts[i].param;
    t.slot0[i] = ts[i].slot0;
    t.slot1[i] = ts[i].slot1;
    t.grad[i] = ts[i].grad;
    t.n[i] = ts[i].n;
    t.decay[i] = ts[i].weight_decay;
  }
}

static_assert(Kernels::kMultiTensorChunk == launch::kMultiTensorChunk);

// Calls f(first, count) for each chunk of at most kMultiTensorChunk entries.
template <typename F>
void for_chunks(int64_t count, F&& f) {
  for (int64_t first = 0; first < count; first += launch::kMultiTensorChunk)
    f(first, count - first < launch::kMultiTensorChunk ? count - first : launch::kMultiTensorChunk);
}
}  // namespace

void CudaKernels::adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const launch::AdamWScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  ensure_current(ctx_.device);
  launch::adamw_update(param, m, v, grad, n, s, ctx_.stream);
}

void CudaKernels::adamw_update_multi(const UpdateSpan* ts, int64_t count, float lr, float beta1, float beta2,
                                     float eps, int64_t step) {
  const launch::AdamWScalars s = adamw_scalars(lr, beta1, beta2, eps, 0.f, step);
  ensure_current(ctx_.device);
  for_chunks(count, [&](int64_t first, int64_t n) {
    launch::UpdateTable t;
    fill_table(t, ts + first, n);
    for (int64_t i = 0; i < n; ++i) t.decay[i] = std::fma(-lr, ts[first + i].weight_decay, 1.f);
    launch::adamw_update_multi(t, s, ctx_.stream);
  });
}

void CudaKernels::sgd_update_multi(const UpdateSpan* ts, int64_t count, float lr, float momentum, bool nesterov,
                                   bool first_step) {
  if (momentum != 0.f)
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].slot0 == nullptr) throw std::invalid_argument("sgd_update: momentum != 0 needs a buffer");
  ensure_current(ctx_.device);
  for_chunks(count, [&](int64_t first, int64_t n) {
    launch::UpdateTable t;
    fill_table(t, ts + first, n);
    launch::sgd_update_multi(t, lr, momentum, nesterov, first_step, ctx_.stream);
  });
}

void CudaKernels::sum_squares_acc_multi(double* out, const Span* xs, int64_t count) {
  ensure_current(ctx_.device);
  for_chunks(count, [&](int64_t first, int64_t n) {
    launch::SpanTable t;
    fill_table(t, xs + first, n);
    Scratch partial(ctx_.allocator, launch::sum_squares_multi_scratch(t) * sizeof(double));
    launch::sum_squares_acc_multi(out, t, partial.as<double>(), ctx_.stream);
  });
}

void CudaKernels::clip_scale_multi(const Span* xs, int64_t count, const double* sum_sq, int64_t parts,
                                   float max_norm) {
  ensure_current(ctx_.device);
  for_chunks(count, [&](int64_t first, int64_t n) {
    launch::SpanTable t;
    fill_table(t, xs + first, n);
    launch::clip_scale_multi(t, sum_sq, parts, max_norm, ctx_.stream);
  });
}

// --- dtype conversion ----------------------------------------------------------------

void CudaKernels::f32_to_f16(uint16_t* dst, const float* src, int64_t n) {
  ensure_current(ctx_.device);
  launch::f32_to_f16(dst, src, n, ctx_.stream);
}

void CudaKernels::f16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  ensure_current(ctx_.device);
  launch::f16_to_f32(dst, src, n, ctx_.stream);
}

void CudaKernels::f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  ensure_current(ctx_.device);
  launch::f32_to_bf16(dst, src, n, ctx_.stream);
}

void CudaKernels::bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  ensure_current(ctx_.device);
  launch::bf16_to_f32(dst, src, n, ctx_.stream);
}

void CudaKernels::synchronize() {
  ensure_current(ctx_.device);  // a reported error is cleared with a memset on this device's stream
  ctx_.synchronize();
}

namespace {
// A timing event recorded on the compute stream. Destroying it while pending is legal:
// CUDA frees it once it fires.
struct EventMark final : Kernels::TimeMark {
  int device = 0;
  cudaEvent_t event = nullptr;
  ~EventMark() override {
    if (event) TANDEM_CUDA_IGNORE(cudaEventDestroy(event));
  }
};
}  // namespace

std::shared_ptr<Kernels::TimeMark> CudaKernels::mark() {
  ensure_current(ctx_.device);
  auto m = std::make_shared<EventMark>();
  m->device = ctx_.device;
  TANDEM_CUDA_CHECK(cudaEventCreate(&m->event), ctx_.device);
  TANDEM_CUDA_CHECK(cudaEventRecord(m->event, ctx_.stream), ctx_.device);
  return m;
}

namespace {
// A sum on its way to the host: the device result is copied into a pinned slot behind
// the reduction, and the slot's event fires when it has landed.
struct PendingSum final : Kernels::PendingValue {
  DeviceContext* ctx = nullptr;
  DeviceContext::PendingSlot slot;
  ~PendingSum() override {
    if (!slot.host) return;
    TANDEM_CUDA_IGNORE(cudaEventSynchronize(slot.done));  // the slot is reused only once its copy has landed
    ctx->give_back_pending_slot(slot);
  }
  double get() override {
    ensure_current(ctx->device);
    TANDEM_CUDA_CHECK(cudaEventSynchronize(slot.done), ctx->device);
    ctx->check_device_error();  // e.g. a label out of range reported by the loss kernel
    return *slot.host;
  }
};
}  // namespace

std::shared_ptr<Kernels::PendingValue> CudaKernels::sum_later(const float* x, int64_t n) {
  ensure_current(ctx_.device);
  auto v = std::make_shared<PendingSum>();
  v->ctx = &ctx_;
  v->slot = ctx_.take_pending_slot();
  // The scratch returns to the cache when this returns: stream order keeps it intact
  // until the copy below has read it.
  Scratch scratch(ctx_.allocator, (launch::sum_scratch(n) + 1) * sizeof(double));
  double* result = scratch.as<double>();
  launch::sum(result, x, n, result + 1, ctx_.stream);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(v->slot.host, result, sizeof(double), cudaMemcpyDeviceToHost, ctx_.stream),
                    ctx_.device);
  TANDEM_CUDA_CHECK(cudaEventRecord(v->slot.done, ctx_.stream), ctx_.device);
  return v;
}

double CudaKernels::elapsed_ms(const TimeMark& from, const TimeMark& to) {
  const auto& a = static_cast<const EventMark&>(from);
  const auto& b = static_cast<const EventMark&>(to);
  ensure_current(ctx_.device);
  TANDEM_CUDA_CHECK(cudaEventSynchronize(b.event), ctx_.device);
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event, b.event), ctx_.device);
  return ms;
}

}  // namespace tandem::cuda
