// Host reductions for every dtype. The loops are plain so the compiler vectorises
// the f32/integer cases; half types convert through float element by element.
#include "collectives/reduce_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include <fp16.h>

namespace tandem {

// IEEE half through fp16.h (libfp16-dev), as runtime/cpu/cpu_kernels.cpp converts it:
// round to nearest even, overflow to inf, NaN stays NaN.
float f16_to_float(uint16_t h) { return fp16_ieee_to_fp32_value(h); }
uint16_t float_to_f16(float f) { return fp16_ieee_from_fp32_value(f); }

// fp16.h has no bfloat16: bf16 is the top half of a float, rounded to nearest even.
float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

template <typename T, typename F>
void combine(void* out, const void* a, const void* b, int64_t count, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (int64_t i = 0; i < count; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void combine_op(ReduceOp op, void* out, const void* a, const void* b, int64_t count) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return combine<T>(out, a, b, count, [](T p, T q) { return static_cast<T>(p + q); });
    case ReduceOp::min:
      return combine<T>(out, a, b, count, [](T p, T q) { return std::min(p, q); });
    case ReduceOp::max:
      return combine<T>(out, a, b, count, [](T p, T q) { return std::max(p, q); });
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void combine_half(ReduceOp op, void* out, const void* a, const void* b, int64_t count) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return combine<uint16_t>(out, a, b, count,
                               [](uint16_t p, uint16_t q) { return Store(Load(p) + Load(q)); });
    case ReduceOp::min:
      return combine<uint16_t>(out, a, b, count, [](uint16_t p, uint16_t q) {
        return Store(std::fmin(Load(p), Load(q)));
      });
    case ReduceOp::max:
      return combine<uint16_t>(out, a, b, count, [](uint16_t p, uint16_t q) {
        return Store(std::fmax(Load(p), Load(q)));
      });
  }
}

}  // namespace

void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b,
                     int64_t count) {
  switch (dtype) {
    case DType::f32: return combine_op<float>(op, out, a, b, count);
    case DType::i32: return combine_op<int32_t>(op, out, a, b, count);
    case DType::i64: return combine_op<int64_t>(op, out, a, b, count);
    case DType::u8: return combine_op<uint8_t>(op, out, a, b, count);
    case DType::f16: return combine_half<f16_to_float, float_to_f16>(op, out, a, b, count);
    case DType::bf16: return combine_half<bf16_to_float, float_to_bf16>(op, out, a, b, count);
  }
}

void divide_elements(DType dtype, void* data, int64_t count, int divisor) {
  for (int64_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::f32: static_cast<float*>(data)[i] /= static_cast<float>(divisor); break;
      case DType::i32: static_cast<int32_t*>(data)[i] /= divisor; break;
      case DType::i64: static_cast<int64_t*>(data)[i] /= divisor; break;
      case DType::u8:
        static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(static_cast<uint8_t*>(data)[i] / divisor);
        break;
      case DType::f16: {
        uint16_t& h = static_cast<uint16_t*>(data)[i];
        h = float_to_f16(f16_to_float(h) / static_cast<float>(divisor));
        break;
      }
      case DType::bf16: {
        uint16_t& h = static_cast<uint16_t*>(data)[i];
        h = float_to_bf16(bf16_to_float(h) / static_cast<float>(divisor));
        break;
      }
    }
  }
}

double load_element(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::i32: return static_cast<const int32_t*>(data)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::u8: return static_cast<const uint8_t*>(data)[i];
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
  }
  return 0;
}

void store_element(DType dtype, void* data, int64_t i, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
    case DType::i32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(value); break;
    case DType::i64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value); break;
    case DType::u8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(value); break;
    case DType::f16:
      static_cast<uint16_t*>(data)[i] = float_to_f16(static_cast<float>(value));
      break;
    case DType::bf16:
      static_cast<uint16_t*>(data)[i] = float_to_bf16(static_cast<float>(value));
      break;
  }
}

}  // namespace tandem
