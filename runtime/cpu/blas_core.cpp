// OpenBLAS core reporting and the opt-in re-dispatch for CPUs OpenBLAS does not know.
#include "runtime/cpu/blas_core.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace tandem::cpu {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

std::string select_native_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || blas_core_name() != "Prescott")
    return blas_core_name();
  // Exported only by DYNAMIC_ARCH builds, hence looked up rather than linked.
  auto quit = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!quit || !init) return blas_core_name();
  __builtin_cpu_init();
  const char* core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
                         ? "SkylakeX"
                     : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                                       : nullptr;
  if (!core) return blas_core_name();
  // gotoblas_dynamic_init reads the core only from the environment.
  setenv("OPENBLAS_CORETYPE", core, 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  return blas_core_name();
}

}  // namespace tandem::cpu
