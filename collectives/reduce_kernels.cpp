// Host reductions for every dtype. The loops are plain so the compiler vectorises
// the f32/integer cases; half types convert through float element by element.
#include "collectives/reduce_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace tandem {

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf or NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalise into a float
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet and non-zero)
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // under half the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

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
