// Which OpenBLAS kernels this process runs. OpenBLAS 0.3.21 (Debian 12) chooses its
// kernels from the CPU's model number; on a CPU newer than it knows (family 6 model
// 207, Emerald Rapids, as on our development VMs) it falls back to its Prescott (SSE3)
// kernels, whose sgemm is 4-5x slower than the AVX-512 ones the CPU could run. Tandem
// does not override OpenBLAS's choice (OPENBLAS_CORETYPE is the user's to set); it says
// so once at start-up, so a slow run is never a silent mystery.
#pragma once

#include <optional>
#include <string>

namespace tandem::cpu {

// OpenBLAS's name for the kernels in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// A warning to print when OpenBLAS runs its Prescott fallback on a CPU with AVX2 or
// AVX-512 and OPENBLAS_CORETYPE is unset; nullopt otherwise.
std::optional<std::string> blas_core_warning();

}  // namespace tandem::cpu
