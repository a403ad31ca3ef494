// Reductions: bias gradients over rows (Linear) and over images and pixels (Conv2d), the
// double-precision sum behind the loss, and the accuracy count.
// Invariant: deterministic. Each block writes a partial sum to scratch in a fixed order
// and one ordered pass adds the partials into the output, so the same input gives the
// same bits on every run (no float atomics); only the count uses integer atomics.
#include "cuda/launch.h"
#include "cuda/launch_common.cuh"

namespace tandem::cuda::launch {

namespace {

constexpr int kColTile = 32;    // columns per block (one warp wide: coalesced rows)
constexpr int kRowLanes = 8;    // threads down each column
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 1024;

int64_t row_chunks(int64_t rows) {
  int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// Sum over the block in a fixed order; the result is valid in thread 0. `smem` holds one
// value per warp.
template <typename T>
__device__ T block_sum(T v, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? smem[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  return v;
}

// partial (chunks, cols): column sums of x over the chunk's rows. With one chunk, adds
// straight into out.
__global__ void column_partials_kernel(float* __restrict__ dst, const float* __restrict__ x, int64_t rows,
                                       int64_t cols, int64_t rows_per_chunk, bool accumulate) {
  __shared__ float tile[kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  int64_t r1 = r0 + rows_per_chunk;
  if (r1 > rows) r1 = rows;
  float s = 0.f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) s += x[r * cols + c];
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.f;
    for (int k = 0; k < kRowLanes; ++k) t += tile[k][threadIdx.x];
    if (accumulate)
      dst[c] += t;
    else
      dst[static_cast<int64_t>(blockIdx.y) * cols + c] = t;
  }
}

// out (cols) += sum over chunks of partial (chunks, cols), chunk by chunk in order.
__global__ void add_partials_kernel(float* __restrict__ out, const float* __restrict__ partial, int64_t chunks,
                                    int64_t cols) {
  TANDEM_GRID_STRIDE_LOOP(c, cols) {
    float s = 0.f;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
    out[c] += s;
  }
}

// partial (chunks, c): channel ch's sum over the chunk's images and all hw pixels.
__global__ void channel_partials_kernel(float* __restrict__ partial, const float* __restrict__ x, int64_t n,
                                        int64_t c, int64_t hw, int64_t imgs_per_chunk) {
  __shared__ float smem[kThreads / 32];
  const int64_t ch = blockIdx.x;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * imgs_per_chunk;
  int64_t i1 = i0 + imgs_per_chunk;
  if (i1 > n) i1 = n;
  const int64_t count = (i1 > i0 ? i1 - i0 : 0) * hw;
  float s = 0.f;
  for (int64_t t = threadIdx.x; t < count; t += blockDim.x) {
    const int64_t i = i0 + t / hw, j = t % hw;
    s += x[(i * c + ch) * hw + j];
  }
  s = block_sum(s, smem);
  if (threadIdx.x == 0) partial[static_cast<int64_t>(blockIdx.y) * c + ch] = s;
}

int64_t channel_chunks(int64_t n, int64_t hw) {
  // About 16k elements per block, whole images per chunk. hw == 0 (nothing to sum) sizes
  // scratch too, before the launcher returns: no division by it.
  if (hw < 1) return 1;
  int64_t per = (16384 + hw - 1) / hw;
  if (per < 1) per = 1;
  int64_t chunks = (n + per - 1) / per;
  return chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
}

int64_t sum_blocks(int64_t n) {
  int64_t b = (n + kThreads * 8 - 1) / (kThreads * 8);
  return b < 1 ? 1 : (b > 1024 ? 1024 : b);
}

__global__ void sum_partials_kernel(double* __restrict__ partial, const float* __restrict__ x, int64_t n) {
  __shared__ double smem[kThreads / 32];
  double s = 0.0;
  TANDEM_GRID_STRIDE_LOOP(i, n) s += static_cast<double>(x[i]);
  s = block_sum(s, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_finish_kernel(double* __restrict__ result, const double* __restrict__ partial, int64_t blocks) {
  __shared__ double smem[kThreads / 32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[i];
  s = block_sum(s, smem);
  if (threadIdx.x == 0) *result = s;
}

__global__ void count_correct_kernel(unsigned long long* __restrict__ result, const float* __restrict__ logits,
                                     const int32_t* __restrict__ labels, int64_t rows, int64_t classes) {
  __shared__ unsigned long long smem[kThreads / 32];
  unsigned long long hits = 0;
  TANDEM_GRID_STRIDE_LOOP(r, rows) {
    const float* lr = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (lr[c] > lr[best]) best = c;  // strictly greater: the first maximum wins, as on the CPU
    hits += best == labels[r];
  }
  hits = block_sum(hits, smem);
  if (threadIdx.x == 0 && hits) atomicAdd(result, hits);
}

}  // namespace

size_t sum_rows_scratch(int64_t rows, int64_t cols) {
  const int64_t chunks = row_chunks(rows);
  return chunks > 1 ? static_cast<size_t>(chunks * cols) : 0;
}

void sum_rows_acc(float* out, const float* x, int64_t rows, int64_t cols, float* scratch, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t chunks = row_chunks(rows);
  const int64_t per = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  const dim3 block(kColTile, kRowLanes);
  column_partials_kernel<<<grid, block, 0, stream>>>(chunks > 1 ? scratch : out, x, rows, cols, per, chunks == 1);
  TANDEM_CUDA_CHECK_LAUNCH(column_partials_kernel);
  if (chunks == 1) return;
  add_partials_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(out, scratch, chunks, cols);
  TANDEM_CUDA_CHECK_LAUNCH(add_partials_kernel);
}

size_t sum_channels_scratch(int64_t n, int64_t c, int64_t hw) {
  return static_cast<size_t>(channel_chunks(n, hw) * c);
}

void sum_channels_acc(float* out, const float* x, int64_t n, int64_t c, int64_t hw, float* scratch,
                      cudaStream_t stream) {
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const int64_t chunks = channel_chunks(n, hw);
  const int64_t per = (n + chunks - 1) / chunks;
  channel_partials_kernel<<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
      scratch, x, n, c, hw, per);
  TANDEM_CUDA_CHECK_LAUNCH(channel_partials_kernel);
  add_partials_kernel<<<blocks_for(c), kThreads, 0, stream>>>(out, scratch, chunks, c);
  TANDEM_CUDA_CHECK_LAUNCH(add_partials_kernel);
}

size_t sum_scratch(int64_t n) { return static_cast<size_t>(sum_blocks(n)); }

void sum(double* result, const float* x, int64_t n, double* scratch, cudaStream_t stream) {
  if (n <= 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream), -1);
    return;
  }
  const int64_t blocks = sum_blocks(n);
  sum_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(scratch, x, n);
  TANDEM_CUDA_CHECK_LAUNCH(sum_partials_kernel);
  sum_finish_kernel<<<1, kThreads, 0, stream>>>(result, scratch, blocks);
  TANDEM_CUDA_CHECK_LAUNCH(sum_finish_kernel);
}

void count_correct(int64_t* result, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                   cudaStream_t stream) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(int64_t), stream), -1);
  if (rows <= 0 || classes <= 0) return;
  count_correct_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(reinterpret_cast<unsigned long long*>(result),
                                                                  logits, labels, rows, classes);
  TANDEM_CUDA_CHECK_LAUNCH(count_correct_kernel);
}

}  // namespace tandem::cuda::launch
