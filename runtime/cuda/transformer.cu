// Transformer CUDA kernels: token embedding, causal self-attention over a fused qkv
// projection (forward and backward), GELU with the tanh approximation, and clipping by
// global gradient norm (sum of squares, then a scale read on the device).
// Invariant: deterministic. Every output element is written by one thread that adds its
// terms in a fixed order (embedding rows in increasing n, as the CPU kernel), and every
// reduction is a fixed tree inside one block or a fixed two-pass over per-block
// partials: no float atomics. Attention keeps exact zeros above the diagonal of att.
// The formulas are the CPU kernels' (runtime/cpu/cpu_kernels_transformer.cpp); expf and
// FMA contraction differ by a few ulp, which tests/gpu's tolerances state.
// Its launchers are declared where they are called (cuda_kernels.cpp), beside launch.h's.
#include "runtime/cuda/launch.h"
#include "runtime/cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;
constexpr int kRowThreads = 128;     // one block per attention row
constexpr int kVocabChunks = 32;     // embedding backward: rows split by id % chunks
constexpr int64_t kMaxSumBlocks = 1024;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Block-wide sum in a fixed tree; every thread gets the result. `smem` holds 32 values.
template <typename T>
__device__ T block_sum_all(T v, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : T(0);
  return warp_sum(v);
}

__device__ float block_max_all(float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : -INFINITY;
  return warp_max(v);
}

// --- embedding -------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* __restrict__ out, const float* __restrict__ table,
                                         const int32_t* __restrict__ ids, int64_t n, int64_t c) {
  TANDEM_GRID_STRIDE_LOOP(i, n * c) out[i] = table[static_cast<int64_t>(ids[i / c]) * c + i % c];
}

// Thread (channel ch, chunk k) owns the rows with id % chunks == k in channel ch, and
// scans n in order: each table element gets its terms in increasing n, with no atomics.
__global__ void embedding_backward_kernel(float* __restrict__ dtable, const float* __restrict__ dout,
                                          const int32_t* __restrict__ ids, int64_t n, int64_t c, int chunks) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int k = blockIdx.y;
  if (ch >= c) return;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id % chunks == k) dtable[static_cast<int64_t>(id) * c + ch] += dout[i * c + ch];
  }
}

// --- attention -------------------------------------------------------------------------
// Block (row i, head h, batch bi) writes att row i of head h: scores for j <= i, a
// max-subtracted softmax, zeros past i. q's row sits in shared memory.

__global__ void attention_softmax_kernel(float* __restrict__ att, const float* __restrict__ qkv, int64_t t,
                                         int64_t c, int64_t nh, float scale) {
  extern __shared__ float q_row[];
  __shared__ float red[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, bi = blockIdx.z, hs = c / nh;
  const float* q = qkv + (bi * t + i) * 3 * c + h * hs;
  const float* kbase = qkv + bi * t * 3 * c + c + h * hs;
  float* row = att + ((bi * nh + h) * t + i) * t;
  for (int64_t d = threadIdx.x; d < hs; d += blockDim.x) q_row[d] = q[d];
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float* kj = kbase + j * 3 * c;
    float s = 0.f;
    for (int64_t d = 0; d < hs; ++d) s += q_row[d] * kj[d];
    s *= scale;
    row[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max_all(mx, red);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.f / block_sum_all(sum, red);
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) row[j] = j <= i ? row[j] * inv : 0.f;
}

// out[bi, ti, h*hs + d] = sum_{j <= ti} att[bi, h, ti, j] v[bi, j, h, d]
__global__ void attention_value_kernel(float* __restrict__ out, const float* __restrict__ att,
                                       const float* __restrict__ qkv, int64_t b, int64_t t, int64_t c, int64_t nh) {
  const int64_t hs = c / nh;
  TANDEM_GRID_STRIDE_LOOP(idx, b * t * c) {
    const int64_t col = idx % c, ti = (idx / c) % t, bi = idx / (c * t);
    const int64_t h = col / hs;
    const float* arow = att + ((bi * nh + h) * t + ti) * t;
    const float* v = qkv + bi * t * 3 * c + 2 * c + col;
    float s = 0.f;
    for (int64_t j = 0; j <= ti; ++j) s += arow[j] * v[j * 3 * c];
    out[idx] = s;
  }
}

// Block (row i, head h, batch bi): datt row = dout_i v^T over j <= i, then in place
// dpre = att * (datt - sum_j datt * att); zeros past i.
__global__ void attention_dpre_kernel(float* __restrict__ datt, const float* __restrict__ att,
                                      const float* __restrict__ dout, const float* __restrict__ qkv, int64_t t,
                                      int64_t c, int64_t nh) {
  extern __shared__ float do_row[];
  __shared__ float red[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, bi = blockIdx.z, hs = c / nh;
  const float* dout_i = dout + (bi * t + i) * c + h * hs;
  const float* vbase = qkv + bi * t * 3 * c + 2 * c + h * hs;
  const int64_t row_off = ((bi * nh + h) * t + i) * t;
  float* drow = datt + row_off;
  const float* arow = att + row_off;
  for (int64_t d = threadIdx.x; d < hs; d += blockDim.x) do_row[d] = dout_i[d];
  __syncthreads();
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float* vj = vbase + j * 3 * c;
    float s = 0.f;
    for (int64_t d = 0; d < hs; ++d) s += do_row[d] * vj[d];
    drow[j] = s;
    dot += s * arow[j];
  }
  dot = block_sum_all(dot, red);
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) drow[j] = j <= i ? arow[j] * (drow[j] - dot) : 0.f;
}

// dqkv (B, T, 3C), every element once: dq = scale dpre k, dk = scale dpre^T q,
// dv = att^T dout, each a sum over the causal range in increasing order.
__global__ void attention_dqkv_kernel(float* __restrict__ dqkv, const float* __restrict__ dpre,
                                      const float* __restrict__ att, const float* __restrict__ dout,
                                      const float* __restrict__ qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                                      float scale) {
  const int64_t hs = c / nh, c3 = 3 * c;
  TANDEM_GRID_STRIDE_LOOP(idx, b * t * c3) {
    const int64_t col3 = idx % c3, ti = (idx / c3) % t, bi = idx / (c3 * t);
    const int64_t part = col3 / c, col = col3 % c, h = col / hs;
    const int64_t head = (bi * nh + h) * t * t;
    const float* base = qkv + bi * t * c3;
    float s = 0.f;
    if (part == 0) {  // dq[ti] = sum_{j <= ti} dpre[ti, j] k[j]
      const float* prow = dpre + head + ti * t;
      for (int64_t j = 0; j <= ti; ++j) s += prow[j] * base[j * c3 + c + col];
      s *= scale;
    } else if (part == 1) {  // dk[ti] = sum_{i >= ti} dpre[i, ti] q[i]
      for (int64_t i = ti; i < t; ++i) s += dpre[head + i * t + ti] * base[i * c3 + col];
      s *= scale;
    } else {  // dv[ti] = sum_{i >= ti} att[i, ti] dout[i]
      const float* dbase = dout + bi * t * c;
      for (int64_t i = ti; i < t; ++i) s += att[head + i * t + ti] * dbase[i * c + col];
    }
    dqkv[idx] = s;
  }
}

// --- GELU, tanh approximation ----------------------------------------------------------
// 0.5 (1 + tanh(u)) = 1 / (1 + e^{-2u}), as the CPU kernel writes it.

__global__ void gelu_tanh_forward_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[i] = xi / (1.f + expf(-2.f * u));
  }
}

__global__ void gelu_tanh_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                          const float* __restrict__ x, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const float xi = x[i];
    const float x2 = xi * xi;
    const float u = kSqrt2OverPi * (xi + kGeluCubic * x2 * xi);
    const float s = 1.f / (1.f + expf(-2.f * u));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x2);
    dx[i] = dy[i] * (s + xi * 2.f * s * (1.f - s) * du);
  }
}

// --- gradient clipping -----------------------------------------------------------------

__global__ void sum_squares_partials_kernel(double* __restrict__ partial, const float* __restrict__ x, int64_t n) {
  __shared__ double red[32];
  double s = 0.0;
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const double v = static_cast<double>(x[i]);
    s += v * v;
  }
  s = block_sum_all(s, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_finish_kernel(double* __restrict__ out, const double* __restrict__ partial,
                                          int64_t blocks) {
  __shared__ double red[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[i];
  s = block_sum_all(s, red);
  if (threadIdx.x == 0) out[0] += s;
}

__global__ void clip_scale_kernel(float* __restrict__ x, int64_t n, const double* __restrict__ sum_sq,
                                  int64_t parts, float max_norm) {
  // The parts added in order, then IEEE sqrtf and division (no fast math): the CPU
  // kernel's coefficient, bit for bit.
  double total = 0.0;
  for (int64_t i = 0; i < parts; ++i) total = __dadd_rn(total, sum_sq[i]);
  const float coef = __fdiv_rn(max_norm, __fadd_rn(__fsqrt_rn(__double2float_rn(total)), 1e-6f));
  if (!(coef < 1.f)) return;
  TANDEM_GRID_STRIDE_LOOP(i, n) x[i] *= coef;
}

int64_t sum_squares_blocks(int64_t n) {
  const int64_t b = blocks_for(n);
  return b > kMaxSumBlocks ? kMaxSumBlocks : b;
}

}  // namespace

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c,
                       cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  embedding_forward_kernel<<<blocks_for(n * c), kThreads, 0, stream>>>(out, table, ids, n, c);
  TANDEM_CUDA_CHECK_LAUNCH(embedding_forward_kernel);
}

void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                            int64_t vocab, cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  const int chunks = static_cast<int>(vocab < kVocabChunks ? (vocab < 1 ? 1 : vocab) : kVocabChunks);
  const int threads = c < 128 ? 32 : 128;
  const dim3 grid(static_cast<unsigned>((c + threads - 1) / threads), static_cast<unsigned>(chunks));
  embedding_backward_kernel<<<grid, threads, 0, stream>>>(dtable, dout, ids, n, c, chunks);
  TANDEM_CUDA_CHECK_LAUNCH(embedding_backward_kernel);
}

void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                       cudaStream_t stream) {
  if (b <= 0 || t <= 0 || c <= 0) return;
  const int64_t hs = c / nh;
  const float scale = 1.f / sqrtf(static_cast<float>(hs));
  const dim3 rows(static_cast<unsigned>(t), static_cast<unsigned>(nh), static_cast<unsigned>(b));
  attention_softmax_kernel<<<rows, kRowThreads, hs * sizeof(float), stream>>>(att, qkv, t, c, nh, scale);
  TANDEM_CUDA_CHECK_LAUNCH(attention_softmax_kernel);
  attention_value_kernel<<<blocks_for(b * t * c), kThreads, 0, stream>>>(out, att, qkv, b, t, c, nh);
  TANDEM_CUDA_CHECK_LAUNCH(attention_value_kernel);
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int64_t b,
                        int64_t t, int64_t c, int64_t nh, cudaStream_t stream) {
  if (b <= 0 || t <= 0 || c <= 0) return;
  const int64_t hs = c / nh;
  const float scale = 1.f / sqrtf(static_cast<float>(hs));
  const dim3 rows(static_cast<unsigned>(t), static_cast<unsigned>(nh), static_cast<unsigned>(b));
  attention_dpre_kernel<<<rows, kRowThreads, hs * sizeof(float), stream>>>(datt, att, dout, qkv, t, c, nh);
  TANDEM_CUDA_CHECK_LAUNCH(attention_dpre_kernel);
  attention_dqkv_kernel<<<blocks_for(b * t * 3 * c), kThreads, 0, stream>>>(dqkv, datt, att, dout, qkv, b, t, c,
                                                                             nh, scale);
  TANDEM_CUDA_CHECK_LAUNCH(attention_dqkv_kernel);
}

void gelu_tanh_forward(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_tanh_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
  TANDEM_CUDA_CHECK_LAUNCH(gelu_tanh_forward_kernel);
}

void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_tanh_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dx, dy, x, n);
  TANDEM_CUDA_CHECK_LAUNCH(gelu_tanh_backward_kernel);
}

size_t sum_squares_scratch(int64_t n) { return static_cast<size_t>(sum_squares_blocks(n)); }

void sum_squares_acc(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = sum_squares_blocks(n);
  sum_squares_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(scratch, x, n);
  TANDEM_CUDA_CHECK_LAUNCH(sum_squares_partials_kernel);
  sum_squares_finish_kernel<<<1, kThreads, 0, stream>>>(out, scratch, blocks);
  TANDEM_CUDA_CHECK_LAUNCH(sum_squares_finish_kernel);
}

void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm, cudaStream_t stream) {
  if (n <= 0) return;
  clip_scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, sum_sq, parts, max_norm);
  TANDEM_CUDA_CHECK_LAUNCH(clip_scale_kernel);
}

}  // namespace tandem::cuda::launch
