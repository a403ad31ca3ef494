// Which instruction set the CPU kernels run with, chosen once per process at run time.
// The binary is built for plain x86-64 (or any other architecture); on x86-64 the kernel
// translation units are compiled three times (runtime/CMakeLists.txt): as they are
// (baseline), and inside an AVX2+FMA+F16C or an AVX-512 target region (cpu_isa_region.h).
// Each copy is a separate CpuKernels class in its own namespace, and kernels() hands out
// the one this CPU (or TANDEM_CPU_KERNELS) selects: the dispatch is the virtual call the
// Kernels interface already makes, so a kernel call costs nothing extra.
// Invariant: every level computes the same bits for the same inputs (the kernels are
// compiled without floating-point contraction, and the vector loops keep the scalar
// order of every float operation); tests/unit/test_cpu_dispatch.cpp checks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {
class Kernels;
}

namespace tandem::cpu {

// Ordered: each level includes the one before.
enum class CpuIsa : uint8_t {
  baseline,  // plain x86-64 (SSE2), or the architecture's own baseline (aarch64: NEON)
  avx2,      // AVX2, FMA and F16C (x86-64-v3's vector part)
  avx512,    // AVX-512 F, BW, DQ and VL (x86-64-v4's vector part)
};

const char* cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512"

// The highest level this build can run on this CPU (cpuid through the compiler's
// __builtin_cpu_supports, which includes the OS's saving of the vector state).
CpuIsa cpu_isa_best();

// The level a TANDEM_CPU_KERNELS value asks for: unset, empty or "auto" gives `best`;
// "baseline", "avx2" or "avx512" that level. A level above `best` throws
// std::runtime_error naming the CPU's best level; any other value throws
// std::invalid_argument naming the valid ones. Pure, so tests can call it.
CpuIsa cpu_isa_from_setting(std::optional<std::string_view> setting, CpuIsa best);

// This process's level: cpu_isa_from_setting(getenv("TANDEM_CPU_KERNELS"), cpu_isa_best()),
// evaluated on the first call and kept (a throw is repeated on the next call).
CpuIsa cpu_isa();

// The kernels of one level (tests run every level; throws std::invalid_argument for a
// level this build lacks, std::runtime_error for one this CPU cannot run).
Kernels& kernels_for_isa(CpuIsa isa);

// The CPU kernel set this process runs, as the run summary names it: cpu_isa_name(),
// or "avx512-bf16" when the bf16 GEMM also takes its AVX512-BF16 path (bf16_gemm.h).
std::string cpu_kernel_set();

// The instances, one per compiled copy (cpu_kernels.cpp, once per level).
namespace baseline {
Kernels& instance();
}
#if defined(TANDEM_CPU_DISPATCH)
namespace avx2 {
Kernels& instance();
}
namespace avx512 {
Kernels& instance();
}
#endif

}  // namespace tandem::cpu
