// Transformer CUDA kernels: token embedding (backward by sorted ids), attention's head
// permutes and causal softmax (forward and backward; the products are cuBLAS's,
// runtime/batched_attention.h), GELU with the tanh approximation, and clipping by global
// gradient norm (sum of squares, then a scale read on the device; per tensor or per table).
// Invariant: deterministic. Every output element is written by one thread that adds its
// terms in a fixed order (embedding rows in increasing n, as the CPU kernel), and every
// reduction is a fixed tree inside one block or a fixed two-pass over per-block
// partials: no float atomics. Attention keeps exact zeros above the diagonal of att.
// The formulas are the CPU kernels' (runtime/cpu/cpu_kernels_transformer.cpp); expf and
// FMA contraction differ by a few ulp, which tests/gpu's tolerances state.
// Its launchers are declared where they are called (cuda_kernels.cpp), beside launch.h's.
#include "runtime/cuda/launch.h"
#include "runtime/cuda/launch_common.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace tandem::cuda::launch {

namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;
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

// --- embedding -------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* __restrict__ out, const float* __restrict__ table,
                                         const int32_t* __restrict__ ids, int64_t n, int64_t c) {
  TANDEM_GRID_STRIDE_LOOP(i, n * c) out[i] = table[static_cast<int64_t>(ids[i / c]) * c + i % c];
}

// Backward by sorted ids: the (id, position) pairs sorted by id (a stable radix sort, so
// equal ids keep increasing positions), then one warp per run of equal ids adds that
// table row's contributions in increasing n, as the CPU kernel does. A row is read and
// written once per step, and only the rows the batch used are touched.
__global__ void iota_kernel(int32_t* __restrict__ out, int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) out[i] = static_cast<int32_t>(i);
}

__global__ void embedding_backward_rows_kernel(float* __restrict__ dtable, const float* __restrict__ dout,
                                               const int32_t* __restrict__ sorted_ids,
                                               const int32_t* __restrict__ positions, int64_t n, int64_t c) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (i >= n) return;
  const int32_t id = sorted_ids[i];
  if (i > 0 && sorted_ids[i - 1] == id) return;  // not the first of its run
  int64_t end = i + 1;
  while (end < n && sorted_ids[end] == id) ++end;
  float* row = dtable + static_cast<int64_t>(id) * c;
  for (int64_t ch = lane; ch < c; ch += 32) {
    float acc = row[ch];
    for (int64_t j = i; j < end; ++j) acc += dout[static_cast<int64_t>(positions[j]) * c + ch];
    row[ch] = acc;
  }
}

int radix_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

// --- attention's batched pieces (runtime/batched_attention.h) ------------------------------
// The products are cuBLAS's (cuda_kernels.cpp); these move heads and run the softmax.

// heads (P, B, NH, T, HS) <-> x (B, T, P, NH, HS); consecutive threads take consecutive d
// on both sides, so both the reads and the writes coalesce in runs of HS.
template <bool kToHeads>
__global__ void permute_heads_kernel(float* __restrict__ heads, float* __restrict__ x, int64_t parts, int64_t b,
                                     int64_t t, int64_t c, int64_t nh) {
  const int64_t hs = c / nh;
  TANDEM_GRID_STRIDE_LOOP(idx, parts * b * t * c) {
    const int64_t d = idx % hs, ti = (idx / hs) % t, h = (idx / (hs * t)) % nh, bi = (idx / (c * t)) % b,
                  p = idx / (b * t * c);
    const int64_t xi = ((bi * t + ti) * parts + p) * c + h * hs + d;
    if (kToHeads)
      heads[idx] = x[xi];
    else
      x[xi] = heads[idx];
  }
}

// One warp per row r of att (rows, T); the row sees columns [0, r % T]. Max, then the
// exps and their sum (each lane in increasing j, then a fixed shuffle tree), then the
// normalised row with exact zeros past the diagonal: coalesced, every pass.
__global__ void causal_softmax_forward_kernel(float* __restrict__ att, int64_t rows, int64_t t) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float* row = att + r * t;
  const int64_t len = r % t + 1;
  float mx = -INFINITY;
  for (int64_t j = lane; j < len; j += 32) mx = fmaxf(mx, row[j]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int64_t j = lane; j < len; j += 32) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.f / warp_sum(sum);
  for (int64_t j = lane; j < t; j += 32) row[j] = j < len ? row[j] * inv : 0.f;
}

// One warp per row: dot = sum datt * att over the prefix, then datt = att * (datt - dot).
__global__ void causal_softmax_backward_kernel(float* __restrict__ datt, const float* __restrict__ att,
                                               int64_t rows, int64_t t) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float* drow = datt + r * t;
  const float* arow = att + r * t;
  const int64_t len = r % t + 1;
  float dot = 0.f;
  for (int64_t j = lane; j < len; j += 32) dot += drow[j] * arow[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < t; j += 32) drow[j] = j < len ? arow[j] * (drow[j] - dot) : 0.f;
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

// The parts added in order, then IEEE sqrtf and division (no fast math): the CPU kernel's
// coefficient, bit for bit.
__device__ __forceinline__ float clip_coefficient(const double* __restrict__ sum_sq, int64_t parts, float max_norm) {
  double total = 0.0;
  for (int64_t i = 0; i < parts; ++i) total = __dadd_rn(total, sum_sq[i]);
  return __fdiv_rn(max_norm, __fadd_rn(__fsqrt_rn(__double2float_rn(total)), 1e-6f));
}

__global__ void clip_scale_kernel(float* __restrict__ x, int64_t n, const double* __restrict__ sum_sq,
                                  int64_t parts, float max_norm) {
  const float coef = clip_coefficient(sum_sq, parts, max_norm);
  if (!(coef < 1.f)) return;
  TANDEM_GRID_STRIDE_LOOP(i, n) x[i] *= coef;
}

// Multi-tensor forms: grid.y picks the table's tensor. The partials sit tensor-major
// (tensor k's block b at k * gridDim.x + b), and the finish kernel adds them in that order.
__global__ void sum_squares_multi_partials_kernel(double* __restrict__ partial, SpanTable t) {
  __shared__ double red[32];
  const int k = blockIdx.y;
  const float* x = t.x[k];
  double s = 0.0;
  TANDEM_GRID_STRIDE_LOOP(i, t.n[k]) {
    const double v = static_cast<double>(x[i]);
    s += v * v;
  }
  s = block_sum_all(s, red);
  if (threadIdx.x == 0) partial[static_cast<int64_t>(k) * gridDim.x + blockIdx.x] = s;
}

__global__ void clip_scale_multi_kernel(SpanTable t, const double* __restrict__ sum_sq, int64_t parts,
                                        float max_norm) {
  const float coef = clip_coefficient(sum_sq, parts, max_norm);
  if (!(coef < 1.f)) return;
  const int k = blockIdx.y;
  float* x = t.x[k];
  TANDEM_GRID_STRIDE_LOOP(i, t.n[k]) x[i] *= coef;
}

int64_t most_elements(const SpanTable& t) {
  int64_t most = 0;
  for (int k = 0; k < t.count; ++k) most = t.n[k] > most ? t.n[k] : most;
  return most;
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

size_t embedding_backward_scratch(int64_t n, int64_t vocab) {
  size_t temp = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0,
                                  radix_bits(vocab));
  return 3 * static_cast<size_t>(n) * sizeof(int32_t) + temp;
}

void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                            int64_t vocab, void* scratch, cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  auto* positions = static_cast<int32_t*>(scratch);  // 0..n-1, then sorted by id
  int32_t* sorted_positions = positions + n;
  int32_t* sorted_ids = sorted_positions + n;
  void* temp = sorted_ids + n;
  size_t temp_bytes = embedding_backward_scratch(n, vocab) - 3 * static_cast<size_t>(n) * sizeof(int32_t);
  iota_kernel<<<blocks_for(n), kThreads, 0, stream>>>(positions, n);
  TANDEM_CUDA_CHECK_LAUNCH(iota_kernel);
  TANDEM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, positions, sorted_positions, n,
                                                    0, radix_bits(vocab), stream),
                    -1);
  constexpr int kWarpsPerBlock = kThreads / 32;
  embedding_backward_rows_kernel<<<static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock), kThreads, 0,
                                   stream>>>(dtable, dout, sorted_ids, sorted_positions, n, c);
  TANDEM_CUDA_CHECK_LAUNCH(embedding_backward_rows_kernel);
}

void split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c, int64_t nh,
                 cudaStream_t stream) {
  const int64_t n = parts * b * t * c;
  if (n <= 0) return;
  permute_heads_kernel<true><<<blocks_for(n), kThreads, 0, stream>>>(heads, const_cast<float*>(x), parts, b, t, c, nh);
  TANDEM_CUDA_CHECK_LAUNCH(permute_heads_kernel);
}

void merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c, int64_t nh,
                 cudaStream_t stream) {
  const int64_t n = parts * b * t * c;
  if (n <= 0) return;
  permute_heads_kernel<false><<<blocks_for(n), kThreads, 0, stream>>>(const_cast<float*>(heads), x, parts, b, t, c,
                                                                       nh);
  TANDEM_CUDA_CHECK_LAUNCH(permute_heads_kernel);
}

void causal_softmax_forward(float* att, int64_t rows, int64_t t, cudaStream_t stream) {
  if (rows <= 0 || t <= 0) return;
  constexpr int kRowsPerBlock = kThreads / 32;
  causal_softmax_forward_kernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0,
                                  stream>>>(att, rows, t);
  TANDEM_CUDA_CHECK_LAUNCH(causal_softmax_forward_kernel);
}

void causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t, cudaStream_t stream) {
  if (rows <= 0 || t <= 0) return;
  constexpr int kRowsPerBlock = kThreads / 32;
  causal_softmax_backward_kernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0,
                                   stream>>>(datt, att, rows, t);
  TANDEM_CUDA_CHECK_LAUNCH(causal_softmax_backward_kernel);
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

size_t sum_squares_multi_scratch(const SpanTable& t) {
  return static_cast<size_t>(sum_squares_blocks(most_elements(t)) * t.count);
}

void sum_squares_acc_multi(double* out, const SpanTable& t, double* scratch, cudaStream_t stream) {
  if (t.count <= 0) return;
  const int64_t blocks = sum_squares_blocks(most_elements(t));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(t.count));
  sum_squares_multi_partials_kernel<<<grid, kThreads, 0, stream>>>(scratch, t);
  TANDEM_CUDA_CHECK_LAUNCH(sum_squares_multi_partials_kernel);
  sum_squares_finish_kernel<<<1, kThreads, 0, stream>>>(out, scratch, blocks * t.count);
  TANDEM_CUDA_CHECK_LAUNCH(sum_squares_finish_kernel);
}

void clip_scale_multi(const SpanTable& t, const double* sum_sq, int64_t parts, float max_norm, cudaStream_t stream) {
  if (t.count <= 0) return;
  const dim3 grid(blocks_for(most_elements(t)), static_cast<unsigned>(t.count));
  clip_scale_multi_kernel<<<grid, kThreads, 0, stream>>>(t, sum_sq, parts, max_norm);
  TANDEM_CUDA_CHECK_LAUNCH(clip_scale_multi_kernel);
}

void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm, cudaStream_t stream) {
  if (n <= 0) return;
  clip_scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, sum_sq, parts, max_norm);
  TANDEM_CUDA_CHECK_LAUNCH(clip_scale_kernel);
}

}  // namespace tandem::cuda::launch
