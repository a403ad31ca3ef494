// Test helper: a layer's backward against central finite differences of its forward
// (tests/unit/test_layers_gradcheck.cpp explains the method and the tolerances), and the
// seeded random inputs those checks use.
//
// For y = f(x; theta) and a fixed random r, L = sum(y * r) (accumulated in double) has
// dL/dy = r, so backward(r) must return dL/dx and add dL/dtheta. Each element is moved
// by +-kEps and (L+ - L-) / (x+ - x-) compared, x+- being the floats actually stored.
// Tolerance |numeric - analytic| <= kAtol + kRtol * |analytic|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/module.h"

namespace tandem::testing {

inline constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 1e-2;

// n values ~ N(offset, scale^2), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f, float offset = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(offset, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.f, float offset = 0.f) {
  return Tensor::from_vector(randn(static_cast<size_t>(shape_numel(shape)), seed, scale, offset), shape);
}

inline void zero_grads(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) std::fill(p->grad.f32(), p->grad.f32() + p->grad.numel(), 0.f);
}

// max|got - want| / max|want| over one pair of value lists (scale floor 1e-12).
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 1e-12, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return diff / scale;
}

// Checks d(sum(fwd(x) * r))/dx against `bwd` (when check_input) and the gradients `bwd`
// added into `params`. Returns what bwd returned (a caller that skipped the input
// gradient can check that none came back).
inline Tensor gradcheck(const std::function<Tensor(const Tensor&)>& fwd,
                        const std::function<Tensor(const Tensor&)>& bwd, const std::vector<Parameter*>& params,
                        Tensor x, uint32_t seed, bool check_input = true) {
  const Tensor y0 = fwd(x);
  const std::vector<float> r = randn(static_cast<size_t>(y0.numel()), seed);
  zero_grads(params);
  const Tensor dx = bwd(Tensor::from_vector(r, y0.shape()));
  auto loss = [&] {
    const std::vector<float> y = fwd(x).to_vector();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
    return s;
  };
  auto check = [&](float* data, const std::vector<float>& analytic, const std::string& what) {
    for (size_t i = 0; i < analytic.size(); ++i) {
      const float saved = data[i];
      const float hi = static_cast<float>(saved + kEps), lo = static_cast<float>(saved - kEps);
      data[i] = hi;
      const double lp = loss();
      data[i] = lo;
      const double lm = loss();
      data[i] = saved;
      const double numeric = (lp - lm) / (static_cast<double>(hi) - lo);
      ASSERT_NEAR(numeric, analytic[i], kAtol + kRtol * std::fabs(analytic[i])) << what << "[" << i << "]";
    }
  };
  std::map<std::string, std::vector<float>> grads;
  for (Parameter* p : params) grads[p->name] = p->grad.to_vector();
  if (check_input) {
    if (!dx.defined() || dx.shape() != x.shape()) {
      ADD_FAILURE() << "backward returned no input gradient of the input's shape " << shape_str(x.shape());
      return dx;
    }
    check(x.f32(), dx.to_vector(), "input");
  }
  for (Parameter* p : params) check(p->value.f32(), grads[p->name], p->name);
  return dx;
}

}  // namespace tandem::testing
