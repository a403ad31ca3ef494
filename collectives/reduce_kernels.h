// Element-wise reductions on host memory for the CPU backends (MPI user ops, Gloo
// reduce functions) and the benchmark's checks. f16 and bf16 are reduced in float
// and rounded back to nearest-even once per pair, which is what NCCL does and what
// makes small-integer sums exact in every dtype. f16 converts through fp16.h
// (libfp16-dev, as the runtime's kernels do); bf16, which fp16.h lacks, by hand.
#pragma once

#include <cstdint>

#include "collectives/types.h"

namespace tandem {

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);  // round to nearest even; overflow -> inf, NaN kept
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);  // round to nearest even; NaN kept

// Reads element i of a host buffer of `dtype` as double (exact for every dtype but
// i64 beyond 2^53), and writes one: used by tests and benchmark checks.
double load_element(DType dtype, const void* data, int64_t i);
void store_element(DType dtype, void* data, int64_t i, double value);

// out[i] = a[i] op b[i] for i < count; out may alias a or b. op is sum, min or max
// (avg is a sum followed by divide_elements).
void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b,
                     int64_t count);

// data[i] /= divisor (integers: truncation toward zero, as C++ division).
void divide_elements(DType dtype, void* data, int64_t count, int divisor);

// The op the engine must run for `op`: avg runs as sum, then divide_elements.
inline ReduceOp engine_op(ReduceOp op) { return op == ReduceOp::avg ? ReduceOp::sum : op; }

}  // namespace tandem
