// The bf16 operands of a layer's matrix products under Precision::bf16, autocast-style:
// each operand (weight, input, output gradient) is rounded to bf16 (nearest even) into a
// buffer the layer owns and reuses across steps, and Kernels::gemm_bf16 multiplies them
// with f32 accumulation into f32 outputs. Master weights and gradients stay f32.
// Invariant: a weight's bf16 copy is made in forward and read by the same step's
// backward; the optimizer only runs after backward, so the copy is never stale.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem {

// x (f32, any shape) rounded to bf16 in `cache` (reused when only the cache holds it,
// as reuse_buffer), on x's device; the result has x's shape.
Tensor to_bf16(Tensor& cache, const Tensor& x);
// The same for n floats at src on `device`, as a flat (n) tensor.
Tensor to_bf16(Tensor& cache, const float* src, int64_t n, Device device);
// A bf16 tensor's raw bits (throws std::logic_error for another dtype).
const uint16_t* bf16_bits(const Tensor& t);

}  // namespace tandem
