// Compute precision of a model's matrix products (--precision): fp32, or bf16 the way
// autocast does it. Under bf16 every GEMM of Linear, TiedLinear and Conv2d takes
// bf16-rounded operands (weights, activations, output gradients) and accumulates in
// f32 (Kernels::gemm_bf16); everything else stays f32: master weights, gradients,
// optimizer state, biases, normalisation, softmax, the loss, attention (docs/precision.md).
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem {

enum class Precision : uint8_t { fp32, bf16 };
const char* precision_str(Precision precision);         // "fp32", "bf16"
Precision parse_precision(std::string_view name);       // throws std::invalid_argument listing the names

}  // namespace tandem
