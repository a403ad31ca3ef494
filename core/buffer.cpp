// Buffer's slicing and typed constructors (core/buffer.h).
#include "core/buffer.h"

#include <stdexcept>
#include <string>

namespace tandem {

Buffer Buffer::slice(int64_t first, int64_t n) const {
  if (first < 0 || n < 0 || first + n > count) {
    throw std::out_of_range("Buffer::slice: elements [" + std::to_string(first) + ", " +
                            std::to_string(first + n) + ") outside a buffer of " +
                            std::to_string(count));
  }
  Buffer b = *this;
  b.data = static_cast<char*>(data) + static_cast<size_t>(first) * dtype_size(dtype);
  b.count = n;
  return b;
}

Buffer cpu_buffer(float* data, int64_t count) { return {data, count, DType::f32, Device::cpu()}; }
Buffer cpu_buffer(int32_t* data, int64_t count) { return {data, count, DType::i32, Device::cpu()}; }
Buffer cpu_buffer(int64_t* data, int64_t count) { return {data, count, DType::i64, Device::cpu()}; }
Buffer cpu_buffer(uint8_t* data, int64_t count) { return {data, count, DType::u8, Device::cpu()}; }
Buffer cpu_buffer(uint16_t* data, int64_t count, DType half_dtype) {
  if (half_dtype != DType::f16 && half_dtype != DType::bf16) {
    throw std::invalid_argument("cpu_buffer(uint16_t*): dtype must be f16 or bf16, not " +
                                std::string(dtype_name(half_dtype)));
  }
  return {data, count, half_dtype, Device::cpu()};
}

}  // namespace tandem
