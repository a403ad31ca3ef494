// The choice of CPU kernel level (cpu_isa.h) and tandem::cpu::kernels(), which hands out
// the chosen level's instance. Compiled once, for the baseline: it must run on every CPU
// to find out which level that CPU can take.
#include "runtime/cpu/cpu_isa.h"

#include <cstdlib>
#include <stdexcept>

#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/cpu_kernels.h"

namespace tandem::cpu {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return "baseline";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "unknown";
}

CpuIsa cpu_isa_best() {
#if defined(TANDEM_CPU_DISPATCH)
  // The same instructions the target regions enable (cpu_isa_region.h), no fewer.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return avx512 ? CpuIsa::avx512 : avx2 ? CpuIsa::avx2 : CpuIsa::baseline;
#else
  return CpuIsa::baseline;  // not x86-64: one copy, vectorised for the architecture's baseline
#endif
}

CpuIsa cpu_isa_from_setting(std::optional<std::string_view> setting, CpuIsa best) {
  if (!setting || setting->empty() || *setting == "auto") return best;
  std::string valid;
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    if (*setting == cpu_isa_name(isa)) {
      if (isa > best)
        throw std::runtime_error("TANDEM_CPU_KERNELS=" + std::string(*setting) +
                                 ": this CPU (or build) runs at most the '" + cpu_isa_name(best) + "' kernels");
      return isa;
    }
    valid += std::string(cpu_isa_name(isa)) + ", ";
  }
  throw std::invalid_argument("TANDEM_CPU_KERNELS='" + std::string(*setting) + "' is not a kernel level (valid: " +
                              valid + "or auto)");
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {  // the environment and the CPU, read once
    const char* env = std::getenv("TANDEM_CPU_KERNELS");
    return cpu_isa_from_setting(env ? std::optional<std::string_view>(env) : std::nullopt, cpu_isa_best());
  }();
  return isa;
}

Kernels& kernels_for_isa(CpuIsa isa) {
  if (isa > cpu_isa_best())
    throw std::runtime_error(std::string("kernels_for_isa: the '") + cpu_isa_name(isa) +
                             "' kernels need instructions this CPU lacks (best: " + cpu_isa_name(cpu_isa_best()) +
                             ")");
  switch (isa) {
    case CpuIsa::baseline: return baseline::instance();
#if defined(TANDEM_CPU_DISPATCH)
    case CpuIsa::avx2: return avx2::instance();
    case CpuIsa::avx512: return avx512::instance();
#else
    default: break;
#endif
  }
  throw std::invalid_argument(std::string("kernels_for_isa: this build has no '") + cpu_isa_name(isa) + "' kernels");
}

Kernels& kernels() {
  static Kernels& chosen = kernels_for_isa(cpu_isa());  // chosen once; every call after is a load
  return chosen;
}

std::string cpu_kernel_set() {
  if (cpu_isa() == CpuIsa::avx512 && bf16_gemm_path() == Bf16GemmPath::native) return "avx512-bf16";
  return cpu_isa_name(cpu_isa());
}

}  // namespace tandem::cpu
