// Test helper: how far apart two models' parameters are, as the worst over parameters
// of max|a - b| / max|b| (the scale floor 1e-6 keeps an all-zero tensor meaningful).
#pragma once

#include <algorithm>
#include <cmath>

#include "runtime/model.h"

namespace tandem::testing {

inline double max_relative_difference(const Model& a, const Model& b) {
  double worst = 0;
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    auto va = a.parameters()[i]->value.to_vector(), vb = b.parameters()[i]->value.to_vector();
    double scale = 1e-6, diff = 0;
    for (size_t j = 0; j < va.size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(vb[j])));
      diff = std::max(diff, static_cast<double>(std::fabs(va[j] - vb[j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace tandem::testing
