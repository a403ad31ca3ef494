// The vocabulary every layer shares: an element type (DType) and where memory lives
// (Device). core/ is the bottom of the layering (docs/architecture.md): it includes nothing
// of Tandem's, and collectives/ and runtime/ both build on it. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}
constexpr const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const {  // "cpu" or "cuda:0"
    return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

}  // namespace tandem
