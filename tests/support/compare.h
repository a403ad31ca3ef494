// Test helper: how far apart two models' parameters are, as the worst over parameters
// of max|a - b| / max|b| (the scale floor 1e-6 keeps an all-zero tensor meaningful).
#pragma once

#include <algorithm>
#include <cmath>

#include "runtime/model.h"

namespace tandem::testing {

// max|a - b| / max|b| (scale floor 1e-6) over one f32 tensor pair.
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double scale = 1e-6, diff = 0;
  for (size_t j = 0; j < va.size(); ++j) {
    scale = std::max(scale, static_cast<double>(std::fabs(vb[j])));
    diff = std::max(diff, static_cast<double>(std::fabs(va[j] - vb[j])));
  }
  return diff / scale;
}

inline double max_relative_difference(const Model& a, const Model& b) {
  double worst = 0;
  for (size_t i = 0; i < a.parameters().size(); ++i)
    worst = std::max(worst, relative_difference(a.parameters()[i]->value, b.parameters()[i]->value));
  return worst;
}

}  // namespace tandem::testing
