// OpenBLAS core reporting, and the process-wide BLAS thread count.
#include "runtime/cpu/blas_core.h"

#include <cblas.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/kernels.h"

namespace tandem {

void set_cpu_threads(int threads) {
  if (threads < 1)
    throw std::invalid_argument("set_cpu_threads: threads must be >= 1, got " + std::to_string(threads));
  openblas_set_num_threads(threads);
}

int cpu_threads() { return openblas_get_num_threads(); }

}  // namespace tandem

namespace tandem::cpu {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::optional<std::string> blas_core_warning() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || blas_core_name() != "Prescott") return std::nullopt;
#if !defined(TANDEM_CPU_DISPATCH)
  return std::nullopt;  // Prescott and its betters are x86 names; __builtin_cpu_supports is x86's
#else
  __builtin_cpu_init();
  const char* better = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
                           ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                                         : nullptr;
  if (!better) return std::nullopt;
  return std::string("OpenBLAS did not recognise this CPU and runs its slowest (Prescott, SSE3) kernels; "
                     "this CPU supports faster ones: set OPENBLAS_CORETYPE=") +
         better + " for about 4x faster matrix products";
#endif
}

}  // namespace tandem::cpu
