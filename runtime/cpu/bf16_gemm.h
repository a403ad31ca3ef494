// bf16 GEMM on the CPU (Kernels::gemm_bf16): C = alpha * op(A) op(B) + beta * C with A and
// B in bf16 and f32 products and sums. Two paths compute the same thing:
//   native    AVX512-BF16 (vdpbf16ps) in Tandem's own blocked kernel (bf16_gemm_avx512.cpp):
//             Debian's OpenBLAS 0.3.21 is built without BUILD_BFLOAT16, so cblas_sbgemm is
//             declared in its cblas.h but not exported by the library.
//   fallback  the bf16 operands widened to f32 (exactly) and OpenBLAS sgemm: every product
//             of two bf16 values is exact in f32, so only the order of the f32 sums differs.
// The native kernel treats bf16 subnormal inputs as zero (the instruction's DAZ); products
// that small do not change a training run.
#pragma once

#include <cstdint>

namespace tandem::cpu {

enum class Bf16GemmPath : uint8_t { native, fallback };
const char* bf16_gemm_path_str(Bf16GemmPath path);  // "native (AVX512-BF16)", "fallback (f32 sgemm)"

// This CPU runs AVX512-BF16 (cpuid, with the OS saving the AVX-512 state).
bool bf16_native_supported();

// The path Kernels::gemm_bf16 takes in this process: native when supported, unless the
// environment says otherwise (read once): TANDEM_BF16_GEMM=fallback forces the fallback,
// =native requires the native kernel (throws std::runtime_error on a CPU without it),
// =auto or unset chooses. Any other value throws std::invalid_argument naming it.
Bf16GemmPath bf16_gemm_path();

// The product on a chosen path (tests compare the two; native throws std::runtime_error
// on a CPU without AVX512-BF16). Row-major, contiguous, as Kernels::gemm.
void gemm_bf16(Bf16GemmPath path, float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N,
               int64_t K, bool trans_a, bool trans_b, float alpha, float beta);

namespace detail {
// The AVX512-BF16 kernel (bf16_gemm_avx512.cpp): C += alpha * op(A) op(B), C already
// scaled by beta; M, N, K > 0. Only called when bf16_native_supported().
void gemm_bf16_avx512(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                      bool trans_a, bool trans_b, float alpha);
}  // namespace detail

}  // namespace tandem::cpu
