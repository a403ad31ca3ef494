// The CPU implementation of Kernels (runtime/kernels.h): OpenBLAS sgemm and plain
// loops the compiler vectorises, at the instruction-set level this process chose once
// (cpu_isa.h: cpuid, or TANDEM_CPU_KERNELS).
#pragma once

#include "runtime/kernels.h"

namespace tandem::cpu {

Kernels& kernels();

}  // namespace tandem::cpu
