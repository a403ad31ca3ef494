// Precision names.
#include "runtime/precision.h"

#include <stdexcept>
#include <string>

namespace tandem {

const char* precision_str(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  throw std::invalid_argument("unknown precision '" + std::string(name) + "' (expected fp32 or bf16)");
}

}  // namespace tandem
