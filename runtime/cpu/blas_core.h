// Which OpenBLAS kernels this process runs, and an opt-in fix for a misdetected CPU.
// OpenBLAS 0.3.21 (Debian 12) chooses its kernels from the CPU's model number; on a CPU
// newer than it knows (family 6 model 207, Emerald Rapids, as on our development VMs) it
// falls back to its Prescott (SSE3) kernels, whose sgemm is 4-5x slower than the
// AVX-512 ones the CPU runs. Nothing here happens unless a program's main asks for it.
// Invariant: an explicit OPENBLAS_CORETYPE in the environment is always respected.
#pragma once

#include <string>

namespace tandem::cpu {

// OpenBLAS's name for the kernels in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// When OpenBLAS runs its Prescott fallback, OPENBLAS_CORETYPE is unset, the library was
// built with DYNAMIC_ARCH, and the CPU supports AVX-512 (or AVX2), re-runs OpenBLAS's
// kernel dispatch for SkylakeX (or Haswell). Call it first thing in main, before any
// BLAS call and before other threads start (it briefly sets OPENBLAS_CORETYPE).
// Returns the core name in use afterwards.
std::string select_native_blas_core();

}  // namespace tandem::cpu
