// The native bf16 GEMM: AVX512-BF16's vdpbf16ps, which adds two bf16 products into each
// f32 lane, in a GotoBLAS-style blocked kernel. op(B) is packed into 32-column panels
// of (even k, odd k) pairs, op(A) into 8-row panels of the same pairs, and an 8x32
// micro-kernel keeps its 16 accumulators in registers across the K block.
// Invariant: only this file holds AVX512-BF16 code, behind target attributes, and it runs
// only after bf16_native_supported() said yes; packing pads with zeros, so every panel
// is full and the edges are masked only when C is written. Off x86-64 (no
// TANDEM_CPU_DISPATCH) the kernel is not compiled and its entry point throws.
#include "runtime/cpu/bf16_gemm.h"

#include <stdexcept>

#if !defined(TANDEM_CPU_DISPATCH)

namespace tandem::cpu::detail {
void gemm_bf16_avx512(float*, const uint16_t*, const uint16_t*, int64_t, int64_t, int64_t, bool, bool, float) {
  throw std::logic_error("gemm_bf16_avx512: this build has no AVX512-BF16 kernel (not an x86-64 build)");
}
}  // namespace tandem::cpu::detail

#else

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/thread_pool.h"

#define TANDEM_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace tandem::cpu::detail {
namespace {

constexpr int64_t MR = 8, NR = 32;                  // micro-tile of C
constexpr int64_t KC = 384, MC = 96, NC = 1024;     // blocks: A (MC, KC) ~72 KiB, B (KC, NC) 768 KiB
static_assert(KC % 2 == 0 && MC % MR == 0 && NC % NR == 0);

// op(B)'s block (kc, nc) at (k0, n0) -> panels of NR columns: panel p, pair kp, column j,
// half h (k = 2 kp + h) at p*kpn*2NR + kp*2NR + 2j + h. Zero beyond kc and nc.
void pack_b(uint16_t* bp, const uint16_t* B, int64_t K, int64_t N, bool tb, int64_t k0, int64_t kc, int64_t n0,
            int64_t nc) {
  const int64_t kpn = (kc + 1) / 2, panels = (nc + NR - 1) / NR;
  std::memset(bp, 0, static_cast<size_t>(panels * kpn * 2 * NR) * sizeof(uint16_t));
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* dst = bp + p * kpn * 2 * NR;
    const int64_t cols = std::min(NR, nc - p * NR), c0 = n0 + p * NR;
    if (!tb) {  // op(B)(k, n) = B[k*N + n]: rows of B are contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const uint16_t* src = B + (k0 + k) * N + c0;
        uint16_t* d = dst + (k / 2) * 2 * NR + (k & 1);
        for (int64_t j = 0; j < cols; ++j) d[2 * j] = src[j];
      }
    } else {  // op(B)(k, n) = B[n*K + k]
      for (int64_t j = 0; j < cols; ++j) {
        const uint16_t* src = B + (c0 + j) * K + k0;
        uint16_t* d = dst + 2 * j;
        for (int64_t k = 0; k < kc; ++k) d[(k / 2) * 2 * NR + (k & 1)] = src[k];
      }
    }
  }
}

// op(A)'s block (mc, kc) at (m0, k0) -> panels of MR rows: panel q, pair kp, row i, half h
// at q*kpn*2MR + kp*2MR + 2i + h. Zero beyond mc and kc.
void pack_a(uint16_t* ap, const uint16_t* A, int64_t M, int64_t K, bool ta, int64_t m0, int64_t mc, int64_t k0,
            int64_t kc) {
  const int64_t kpn = (kc + 1) / 2, panels = (mc + MR - 1) / MR;
  std::memset(ap, 0, static_cast<size_t>(panels * kpn * 2 * MR) * sizeof(uint16_t));
  for (int64_t q = 0; q < panels; ++q) {
    uint16_t* dst = ap + q * kpn * 2 * MR;
    const int64_t rows = std::min(MR, mc - q * MR), r0 = m0 + q * MR;
    if (!ta) {  // op(A)(m, k) = A[m*K + k]
      for (int64_t i = 0; i < rows; ++i) {
        const uint16_t* src = A + (r0 + i) * K + k0;
        uint16_t* d = dst + 2 * i;
        for (int64_t k = 0; k < kc; ++k) d[(k / 2) * 2 * MR + (k & 1)] = src[k];
      }
    } else {  // op(A)(m, k) = A[k*M + m]
      for (int64_t k = 0; k < kc; ++k) {
        const uint16_t* src = A + (k0 + k) * M + r0;
        uint16_t* d = dst + (k / 2) * 2 * MR + (k & 1);
        for (int64_t i = 0; i < rows; ++i) d[2 * i] = src[i];
      }
    }
  }
}

// C (rows <= MR, cols <= NR; row stride ldc) += alpha * (A panel) (B panel) over kpn pairs.
TANDEM_AVX512BF16 void micro_kernel(float* C, int64_t ldc, const uint16_t* ap, const uint16_t* bp, int64_t kpn,
                                    int64_t rows, int64_t cols, float alpha) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < kpn; ++kp) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + kp * 2 * NR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + kp * 2 * NR + 32);
    const uint16_t* a = ap + kp * 2 * MR;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);
    }
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xffff) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < rows; ++i) {
    float* r = C + i * ldc;
    _mm512_mask_storeu_ps(r, m0, _mm512_fmadd_ps(c0[i], va, _mm512_maskz_loadu_ps(m0, r)));
    if (m1) _mm512_mask_storeu_ps(r + 16, m1, _mm512_fmadd_ps(c1[i], va, _mm512_maskz_loadu_ps(m1, r + 16)));
  }
}

// Columns [n_begin, n_end) of C; every call packs into its own thread's buffers.
void gemm_columns(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                  float alpha, int64_t n_begin, int64_t n_end) {
  thread_local std::vector<uint16_t> apack, bpack;
  apack.resize(static_cast<size_t>(MC * KC));
  bpack.resize(static_cast<size_t>(KC * NC));
  for (int64_t jc = n_begin; jc < n_end; jc += NC) {
    const int64_t nc = std::min(NC, n_end - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc), kpn = (kc + 1) / 2;
      pack_b(bpack.data(), B, K, N, tb, pc, kc, jc, nc);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a(apack.data(), A, M, K, ta, ic, mc, pc, kc);
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            micro_kernel(C + (ic + ir) * N + jc + jr, N, apack.data() + (ir / MR) * kpn * 2 * MR,
                         bpack.data() + (jr / NR) * kpn * 2 * NR, kpn, std::min(MR, mc - ir),
                         std::min(NR, nc - jr), alpha);
      }
    }
  }
}

}  // namespace

void gemm_bf16_avx512(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K, bool ta,
                      bool tb, float alpha) {
  // Threads split C's columns in NR-aligned ranges, as many as OpenBLAS may use
  // (set_cpu_threads). One pool serves the process; a caller that finds it busy (DP's
  // replica threads run with one BLAS thread each anyway) computes on its own thread.
  const int threads = std::min<int64_t>(cpu_threads(), (N + NR - 1) / NR);
  static std::mutex pool_mutex;
  static std::unique_ptr<ThreadPool> pool;
  std::unique_lock<std::mutex> lock(pool_mutex, std::defer_lock);
  if (threads > 1 && M * N * K >= (int64_t{1} << 18) && lock.try_lock()) {
    if (!pool || pool->size() != threads) pool = std::make_unique<ThreadPool>(threads);
    const int64_t panels = (N + NR - 1) / NR;
    pool->run_all([&](int t) {
      const int64_t p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
      gemm_columns(C, A, B, M, N, K, ta, tb, alpha, p0 * NR, std::min(N, p1 * NR));
    });
    return;
  }
  gemm_columns(C, A, B, M, N, K, ta, tb, alpha, 0, N);
}

}  // namespace tandem::cpu::detail

#endif  // TANDEM_CPU_DISPATCH
