// The target region a CPU kernel translation unit opens after its #includes and closes at
// its end: TANDEM_CPU_ISA_BEGIN opens namespace tandem::cpu::<level> (and, above the
// baseline, a compiler target region for that level's instructions), TANDEM_CPU_ISA_END
// closes both. TANDEM_CPU_ISA names the copy being compiled: CMake compiles each kernel
// file as it is (baseline) and, on x86-64, from generated files that define it to avx2 or
// avx512 and #include the kernel file (runtime/CMakeLists.txt).
// Invariant: only code inside a region runs the level's instructions, and every name
// defined there lives in the level's namespace (or an anonymous one). Headers are
// included before the region, so their inline functions and templates are emitted with
// the baseline target: a library function the linker keeps from any copy runs on any
// CPU. (A per-file -march would break that: the linker may keep the AVX-512 copy of
// std::vector's code for every caller.) TANDEM_CPU_ISA_LEVEL is 0, 1, 2 for #if tests,
// since __AVX2__ and friends do not follow a target region under every compiler.
#pragma once

#ifndef TANDEM_CPU_ISA
#define TANDEM_CPU_ISA baseline
#endif

#define TANDEM_CPU_ISA_baseline_LEVEL 0
#define TANDEM_CPU_ISA_avx2_LEVEL 1
#define TANDEM_CPU_ISA_avx512_LEVEL 2
#define TANDEM_CPU_ISA_LEVEL_OF(isa) TANDEM_CPU_ISA_LEVEL_OF_(isa)
#define TANDEM_CPU_ISA_LEVEL_OF_(isa) TANDEM_CPU_ISA_##isa##_LEVEL
#define TANDEM_CPU_ISA_LEVEL TANDEM_CPU_ISA_LEVEL_OF(TANDEM_CPU_ISA)

#if TANDEM_CPU_ISA_LEVEL > 0 && !(defined(__x86_64__) || defined(__i386__))
#error "runtime/cpu: the avx2 and avx512 kernel copies are x86 only (TANDEM_CPU_DISPATCH is set off x86?)"
#endif

// The instructions of each level: what cpu_isa_best() checks (cpu_isa.cpp), no more.
#define TANDEM_CPU_TARGET_avx2 "avx2,fma,f16c"
#define TANDEM_CPU_TARGET_avx512 "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"

#if TANDEM_CPU_ISA_LEVEL == 0
#define TANDEM_CPU_ISA_BEGIN namespace tandem::cpu::baseline {
#define TANDEM_CPU_ISA_END }
#elif defined(__clang__)
#define TANDEM_CPU_ISA_PRAGMA_(x) _Pragma(#x)
#define TANDEM_CPU_ISA_PUSH_(t) \
  TANDEM_CPU_ISA_PRAGMA_(clang attribute push(__attribute__((target(t))), apply_to = function))
#define TANDEM_CPU_ISA_TARGET_(isa) TANDEM_CPU_TARGET_##isa
#define TANDEM_CPU_ISA_TARGET(isa) TANDEM_CPU_ISA_TARGET_(isa)
#define TANDEM_CPU_ISA_BEGIN                        \
  TANDEM_CPU_ISA_PUSH_(TANDEM_CPU_ISA_TARGET(TANDEM_CPU_ISA)) \
  namespace tandem::cpu::TANDEM_CPU_ISA {
#define TANDEM_CPU_ISA_END \
  }                        \
  _Pragma("clang attribute pop")
#else  // GCC
#define TANDEM_CPU_ISA_PRAGMA_(x) _Pragma(#x)
#define TANDEM_CPU_ISA_TARGET_PRAGMA_(t) TANDEM_CPU_ISA_PRAGMA_(GCC target(t))
#define TANDEM_CPU_ISA_TARGET_(isa) TANDEM_CPU_TARGET_##isa
#define TANDEM_CPU_ISA_TARGET(isa) TANDEM_CPU_ISA_TARGET_(isa)
#define TANDEM_CPU_ISA_BEGIN                                     \
  _Pragma("GCC push_options")                                    \
  TANDEM_CPU_ISA_TARGET_PRAGMA_(TANDEM_CPU_ISA_TARGET(TANDEM_CPU_ISA)) \
  namespace tandem::cpu::TANDEM_CPU_ISA {
#define TANDEM_CPU_ISA_END \
  }                        \
  _Pragma("GCC pop_options")
#endif
