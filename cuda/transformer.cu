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
#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <cmath>

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

// --- attention, tiled (flash-style) ----------------------------------------------------
// The CPU's tiled algorithm (cpu_kernels_transformer.cpp) with one thread per row: a block
// of kTileRows threads takes kTileRows query rows (out, dq) or key rows (dk, dv) of one
// (batch, head) and walks the other side in tiles of kTileCols rows staged in shared memory
// (loads coalesce in runs of HS). Each thread keeps its rows' vectors in registers, padded
// with zeros to kMaxHs (32, 64 or 128, the smallest that holds HS), so every loop over the
// head's dimensions unrolls; the loops over a tile's rows do not (unrolled as well, the
// file took 104 s to compile instead of 15.5). Forward keeps one tile's scores per thread
// in shared memory (its own column, so no bank conflicts): nothing T x T.
// Each output element is written once, by its thread, after a fixed order of terms.

constexpr int kTileRows = 64;
constexpr int kTileCols = 32;

// Rows [r0, r0 + kTileCols) of a (T, HS) head view with row stride `ld` into shared memory,
// zeros past T and past HS.
template <int kMaxHs>
__device__ __forceinline__ void stage_tile(float (*dst)[kMaxHs], const float* __restrict__ src, int64_t r0,
                                           int64_t t, int64_t hs, int64_t ld) {
  for (int idx = threadIdx.x; idx < kTileCols * kMaxHs; idx += blockDim.x) {
    const int j = idx / kMaxHs, d = idx % kMaxHs;
    const int64_t r = r0 + j;
    dst[j][d] = r < t && d < hs ? src[r * ld + d] : 0.f;
  }
}

template <int kMaxHs>
__device__ __forceinline__ void load_row(float (&dst)[kMaxHs], const float* __restrict__ src, int64_t hs) {
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d) dst[d] = d < hs ? src[d] : 0.f;
}

template <int kMaxHs>
__device__ __forceinline__ float dot_row(const float (&a)[kMaxHs], const float* b) {
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d) s += a[d] * b[d];
  return s;
}

// A query-row block of grid (ceil(T / kTileRows), B * NH): its batch and head
// (blockIdx.y = bi * NH + h), the head size, this thread's row, and the end of the keys the
// block's rows see (row i's keys are [0, i]; the block's tiles end at its last row's).
struct QueryRows {
  int64_t bi, h, hs, row, keys_end;
};
__device__ __forceinline__ QueryRows query_rows(int64_t t, int64_t c, int64_t nh) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTileRows;
  return {blockIdx.y / nh, blockIdx.y % nh, c / nh, first + threadIdx.x,
          t < first + kTileRows ? t : first + kTileRows};
}

// out and lse, one thread per query row: online softmax over the key tiles it sees.
template <int kMaxHs>
__global__ void attention_forward_tiled_kernel(float* __restrict__ out, float* __restrict__ lse,
                                               const float* __restrict__ qkv, int64_t t, int64_t c, int64_t nh,
                                               float scale) {
  __shared__ float ks[kTileCols][kMaxHs], vs[kTileCols][kMaxHs];
  __shared__ float sc[kTileCols][kTileRows];  // each thread's scores of the tile, in its own column
  const auto [bi, h, hs, row, keys_end] = query_rows(t, c, nh);
  const float* base = qkv + bi * t * 3 * c + h * hs;
  const bool active = row < t;
  float q[kMaxHs], o[kMaxHs];
  if (active) load_row(q, base + row * 3 * c, hs);
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d) o[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int64_t k0 = 0; k0 < keys_end; k0 += kTileCols) {
    __syncthreads();  // the previous tile's readers are done
    stage_tile<kMaxHs>(ks, base + c, k0, t, hs, 3 * c);
    stage_tile<kMaxHs>(vs, base + 2 * c, k0, t, hs, 3 * c);
    __syncthreads();
    if (!active || k0 > row) continue;
    const int n = static_cast<int>(row - k0 + 1 < kTileCols ? row - k0 + 1 : kTileCols);
    float mx = m;
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      const float s = dot_row(q, ks[j]) * scale;
      sc[j][threadIdx.x] = s;
      mx = fmaxf(mx, s);
    }
    const float alpha = expf(m - mx);  // 0 on the first tile (m = -inf)
    l *= alpha;
#pragma unroll
    for (int d = 0; d < kMaxHs; ++d) o[d] *= alpha;
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      const float p = expf(sc[j][threadIdx.x] - mx);
      l += p;
#pragma unroll
      for (int d = 0; d < kMaxHs; ++d) o[d] += p * vs[j][d];
    }
    m = mx;
  }
  if (!active) return;
  const float inv = 1.f / l;
  float* orow = out + (bi * t + row) * c + h * hs;
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d)
    if (d < hs) orow[d] = o[d] * inv;
  lse[blockIdx.y * t + row] = m + logf(l);
}

// delta (B, NH, T): row i's dout . out over its head, one warp per row (a fixed tree).
__global__ void attention_delta_kernel(float* __restrict__ delta, const float* __restrict__ dout,
                                       const float* __restrict__ out, int64_t b, int64_t t, int64_t c, int64_t nh) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= b * nh * t) return;
  const int64_t hs = c / nh, row = r % t, h = (r / t) % nh, bi = r / (t * nh);
  const int64_t off = (bi * t + row) * c + h * hs;
  float s = 0.f;
  for (int64_t d = lane; d < hs; d += 32) s += dout[off + d] * out[off + d];
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// dq: one thread per query row against key tiles up to its own.
template <int kMaxHs>
__global__ void attention_dq_tiled_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                          const float* __restrict__ qkv, const float* __restrict__ lse,
                                          const float* __restrict__ delta, int64_t t, int64_t c, int64_t nh,
                                          float scale) {
  __shared__ float ks[kTileCols][kMaxHs], vs[kTileCols][kMaxHs];
  const auto [bi, h, hs, row, keys_end] = query_rows(t, c, nh);
  const int64_t off = bi * t * 3 * c + h * hs;
  const float* base = qkv + off;
  const bool active = row < t;
  float q[kMaxHs], g[kMaxHs], dq[kMaxHs];
  float row_lse = 0.f, row_delta = 0.f;
  if (active) {
    load_row(q, base + row * 3 * c, hs);
    load_row(g, dout + (bi * t + row) * c + h * hs, hs);
    row_lse = lse[blockIdx.y * t + row];
    row_delta = delta[blockIdx.y * t + row];
  }
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d) dq[d] = 0.f;
  for (int64_t k0 = 0; k0 < keys_end; k0 += kTileCols) {
    __syncthreads();
    stage_tile<kMaxHs>(ks, base + c, k0, t, hs, 3 * c);
    stage_tile<kMaxHs>(vs, base + 2 * c, k0, t, hs, 3 * c);
    __syncthreads();
    if (!active || k0 > row) continue;
    const int n = static_cast<int>(row - k0 + 1 < kTileCols ? row - k0 + 1 : kTileCols);
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      const float p = expf(dot_row(q, ks[j]) * scale - row_lse);
      const float ds = p * (dot_row(g, vs[j]) - row_delta) * scale;
#pragma unroll
      for (int d = 0; d < kMaxHs; ++d) dq[d] += ds * ks[j][d];
    }
  }
  if (!active) return;
  float* dst = dqkv + off + row * 3 * c;
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d)
    if (d < hs) dst[d] = dq[d];
}

// dk, dv: one thread per key row against the query tiles that see it (queries >= key).
template <int kMaxHs>
__global__ void attention_dkv_tiled_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                           const float* __restrict__ qkv, const float* __restrict__ lse,
                                           const float* __restrict__ delta, int64_t t, int64_t c, int64_t nh,
                                           float scale) {
  __shared__ float qs[kTileCols][kMaxHs], gs[kTileCols][kMaxHs];
  __shared__ float ls[kTileCols], dl[kTileCols];
  const int64_t bi = blockIdx.y / nh, h = blockIdx.y % nh, hs = c / nh;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTileRows, key = first + threadIdx.x;
  const int64_t off = bi * t * 3 * c + h * hs;
  const float* base = qkv + off;
  const bool active = key < t;
  float k[kMaxHs], v[kMaxHs], dk[kMaxHs], dv[kMaxHs];
  if (active) {
    load_row(k, base + c + key * 3 * c, hs);
    load_row(v, base + 2 * c + key * 3 * c, hs);
  }
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d) dk[d] = 0.f, dv[d] = 0.f;
  for (int64_t q0 = first; q0 < t; q0 += kTileCols) {
    __syncthreads();
    stage_tile<kMaxHs>(qs, base, q0, t, hs, 3 * c);
    stage_tile<kMaxHs>(gs, dout + bi * t * c + h * hs, q0, t, hs, c);
    for (int j = threadIdx.x; j < kTileCols; j += blockDim.x) {
      const int64_t r = q0 + j;
      ls[j] = r < t ? lse[blockIdx.y * t + r] : 0.f;
      dl[j] = r < t ? delta[blockIdx.y * t + r] : 0.f;
    }
    __syncthreads();
    if (!active || q0 + kTileCols <= key) continue;
#pragma unroll 1
    for (int i = 0; i < kTileCols; ++i) {
      const int64_t query = q0 + i;
      if (query < key || query >= t) continue;
      const float p = expf(dot_row(k, qs[i]) * scale - ls[i]);
      const float ds = p * (dot_row(v, gs[i]) - dl[i]) * scale;
#pragma unroll
      for (int d = 0; d < kMaxHs; ++d) {
        dv[d] += p * gs[i][d];
        dk[d] += ds * qs[i][d];
      }
    }
  }
  if (!active) return;
  float* dst = dqkv + off + key * 3 * c;
#pragma unroll
  for (int d = 0; d < kMaxHs; ++d)
    if (d < hs) dst[c + d] = dk[d], dst[2 * c + d] = dv[d];
}


int tiled_head_bucket(int64_t hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

#define TANDEM_TILED_ATTENTION_LAUNCH(kernel, hs, grid, stream, ...)                                    \
  switch (tiled_head_bucket(hs)) {                                                                  \
    case 32: kernel<32><<<grid, kTileRows, 0, stream>>>(__VA_ARGS__); break;                         \
    case 64: kernel<64><<<grid, kTileRows, 0, stream>>>(__VA_ARGS__); break;                         \
    default: kernel<128><<<grid, kTileRows, 0, stream>>>(__VA_ARGS__); break;                        \
  }                                                                                                 \
  TANDEM_CUDA_CHECK_LAUNCH(kernel)

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

// Tiled attention: grid (ceil(T / kTileRows), B * NH), kTileRows threads; cuda_kernels.cpp
// checks HS <= kTiledAttentionMaxHs and B * NH <= kTiledAttentionMaxHeads first.
void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                             cudaStream_t stream) {
  if (b <= 0 || t <= 0) return;
  const int64_t hs = c / nh;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const dim3 grid(static_cast<unsigned>((t + kTileRows - 1) / kTileRows), static_cast<unsigned>(b * nh));
  TANDEM_TILED_ATTENTION_LAUNCH(attention_forward_tiled_kernel, hs, grid, stream, out, lse, qkv, t, c, nh, scale);
}

void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              float* delta, int64_t b, int64_t t, int64_t c, int64_t nh, cudaStream_t stream) {
  if (b <= 0 || t <= 0) return;
  const int64_t hs = c / nh, rows = b * nh * t;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  constexpr int kRowsPerBlock = kThreads / 32;
  attention_delta_kernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0, stream>>>(
      delta, dout, out, b, t, c, nh);
  TANDEM_CUDA_CHECK_LAUNCH(attention_delta_kernel);
  const dim3 grid(static_cast<unsigned>((t + kTileRows - 1) / kTileRows), static_cast<unsigned>(b * nh));
  TANDEM_TILED_ATTENTION_LAUNCH(attention_dq_tiled_kernel, hs, grid, stream, dqkv, dout, qkv, lse, delta, t, c, nh,
                                scale);
  TANDEM_TILED_ATTENTION_LAUNCH(attention_dkv_tiled_kernel, hs, grid, stream, dqkv, dout, qkv, lse, delta, t, c, nh,
                                scale);
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
