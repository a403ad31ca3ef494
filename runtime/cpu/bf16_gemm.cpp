// bf16 GEMM on the CPU: the choice between the AVX512-BF16 kernel and the f32 fallback
// (bf16_gemm.h) and the fallback itself; CpuKernels::gemm_bf16 (cpu_kernels.cpp) calls it.
#include "runtime/cpu/bf16_gemm.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/cpu_kernels.h"

namespace tandem::cpu {

const char* bf16_gemm_path_str(Bf16GemmPath path) {
  return path == Bf16GemmPath::native ? "native (AVX512-BF16)" : "fallback (f32 sgemm)";
}

bool bf16_native_supported() {
#if defined(TANDEM_CPU_DISPATCH)
  __builtin_cpu_init();
  // libgcc's feature bits include the OS check (XCR0 saves the AVX-512 state).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;  // not an x86-64 build: the kernel is not compiled (bf16_gemm_avx512.cpp)
#endif
}

namespace {

// The native kernel is AVX-512 code: it runs only where the CPU kernels run at the avx512
// level, so TANDEM_CPU_KERNELS=avx2 (or baseline) keeps every kernel of the process below it.
Bf16GemmPath choose_path() {
  const char* env = std::getenv("TANDEM_BF16_GEMM");
  const std::string want = env ? env : "auto";
  if (want == "fallback") return Bf16GemmPath::fallback;
  const bool level_allows = cpu_isa() == CpuIsa::avx512;
  if (want == "native") {
    if (!bf16_native_supported())
      throw std::runtime_error("TANDEM_BF16_GEMM=native, but this CPU has no AVX512-BF16");
    if (!level_allows)
      throw std::runtime_error(std::string("TANDEM_BF16_GEMM=native needs the avx512 CPU kernels, but they run at ") +
                               cpu_isa_name(cpu_isa()) + " (TANDEM_CPU_KERNELS)");
    return Bf16GemmPath::native;
  }
  if (want == "auto" || want.empty())
    return bf16_native_supported() && level_allows ? Bf16GemmPath::native : Bf16GemmPath::fallback;
  throw std::invalid_argument("TANDEM_BF16_GEMM='" + want + "' (expected auto, native or fallback)");
}

void widen(std::vector<float>& dst, const uint16_t* src, int64_t n) {
  dst.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[static_cast<size_t>(i)], &bits, sizeof bits);
  }
}

}  // namespace

Bf16GemmPath bf16_gemm_path() {
  static const Bf16GemmPath path = choose_path();  // the environment and the CPU, read once
  return path;
}

void gemm_bf16(Bf16GemmPath path, float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
               bool trans_a, bool trans_b, float alpha, float beta) {
  if (M < 0 || N < 0 || K < 0)
    throw std::invalid_argument("gemm_bf16: negative size M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                " K=" + std::to_string(K));
  if (M == 0 || N == 0) return;
  Kernels& k = kernels();
  if (path == Bf16GemmPath::fallback) {
    // Widening is exact, and so is every product of two bf16 values in f32: sgemm then
    // sums the same products the native kernel does.
    thread_local std::vector<float> a32, b32;
    widen(a32, A, M * K);
    widen(b32, B, K * N);
    k.gemm(C, a32.data(), b32.data(), M, N, K, trans_a, trans_b, alpha, beta);
    return;
  }
  if (!bf16_native_supported()) throw std::runtime_error("gemm_bf16: this CPU has no AVX512-BF16");
  if (beta == 0.f)
    k.fill(C, M * N, 0.f);  // overwrite: C may be uninitialised
  else if (beta != 1.f)
    k.scale(C, M * N, beta);
  if (K == 0) return;
  detail::gemm_bf16_avx512(C, A, B, M, N, K, trans_a, trans_b, alpha);
}

}  // namespace tandem::cpu
