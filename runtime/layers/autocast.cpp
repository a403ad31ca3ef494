// bf16 operand buffers for the layers' matrix products.
#include "runtime/layers/autocast.h"

#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Tensor to_bf16(Tensor& cache, const float* src, int64_t n, Device device) {
  Tensor out = reuse_buffer(cache, {n}, device, DType::bf16);
  kernels_for(device).f32_to_bf16(out.data<uint16_t>(), src, n);
  return out;
}

Tensor to_bf16(Tensor& cache, const Tensor& x) {
  Tensor out = reuse_buffer(cache, x.shape(), x.device(), DType::bf16);
  kernels_for(x.device()).f32_to_bf16(out.data<uint16_t>(), x.f32(), x.numel());
  return out;
}

const uint16_t* bf16_bits(const Tensor& t) {
  if (t.dtype() != DType::bf16)
    throw std::logic_error(std::string("bf16_bits: tensor is ") + dtype_name(t.dtype()) + ", not bf16");
  return t.data<uint16_t>();
}

}  // namespace tandem
