// Causal self-attention as batched products: how a GPU runs Kernels::attention_forward and
// attention_backward (cuda/ on cuBLAS's strided-batched GEMM, and the emulated GPU
// on the CPU's), written once over the Kernels primitives so both run the same steps.
//   forward:  split qkv into heads; S = scale q k^T (one batched GEMM over B*NH heads);
//             causal softmax in place, one row per warp; y = att v; merge y's heads into out.
//   backward: split qkv and dout; datt = dy v^T; dv = att^T dy; softmax backward in place;
//             dq = scale dpre k; dk = scale dpre^T q; merge dq, dk, dv into dqkv.
// Five launches forward and eight backward per layer, each over the whole batch, and every
// product a dense GEMM (the masked half of the square is computed and then zeroed, as
// llm.c does). att (B, NH, T, T) is still materialised.
// Under Precision::bf16 the four products of backward and the two of forward take bf16
// operands (q, k, v, dy, att and dpre rounded once each, as autocast does) with f32 products,
// sums and outputs (Kernels::gemm_strided_batched_bf16); the softmax and its backward stay
// f32. Every device runs this composition under bf16, so the CPU, the emulated GPU and
// cuBLAS compute the same steps.
// Invariant: the fp32 values are attention_forward's / attention_backward's (the CPU runs the
// same row functions; tests/unit/test_batched_attention.cpp holds the CPU composition to
// the fused CPU kernel bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/precision.h"

namespace tandem {

class Kernels;

// Scratch floats the caller provides (on the kernels' device): 3 B T C forward, 6 B T C
// backward; under bf16 also the bf16 copies of the operands (half a float each): 3 B T C
// (forward) or 4 B T C (backward) of them and one of att (B NH T T).
size_t batched_attention_scratch(int64_t b, int64_t t, int64_t c, int64_t nh, bool backward,
                                 Precision precision = Precision::fp32);

void batched_attention_forward(Kernels& k, float* out, float* att, const float* qkv, float* scratch, int64_t b,
                               int64_t t, int64_t c, int64_t nh, Precision precision = Precision::fp32);
void batched_attention_backward(Kernels& k, float* dqkv, float* datt, const float* dout, const float* qkv,
                                const float* att, float* scratch, int64_t b, int64_t t, int64_t c, int64_t nh,
                                Precision precision = Precision::fp32);

}  // namespace tandem
