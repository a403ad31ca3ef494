// OpenBLAS core reporting.
#include "runtime/cpu/blas_core.h"

#include <cblas.h>

#include <cstdlib>

namespace tandem::cpu {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::optional<std::string> blas_core_warning() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || blas_core_name() != "Prescott") return std::nullopt;
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
}

}  // namespace tandem::cpu
