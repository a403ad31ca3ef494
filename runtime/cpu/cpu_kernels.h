// The CPU implementation of Kernels (runtime/kernels.h): OpenBLAS sgemm and plain
// loops the compiler vectorises.
#pragma once

#include "runtime/kernels.h"

namespace tandem::cpu {

Kernels& kernels();

}  // namespace tandem::cpu
