// Shared by tandem_gpu_tests: the skip rule, random inputs, host<->device helpers, and
// the three comparisons every test states its tolerance with:
//   expect_bitwise   identical bits (NaNs: both NaN)
//   expect_close     |got - want| <= abs + rel * |want|, element by element
//   expect_scaled    |got - want| <= tol * scale[i], scale = the sum of |terms| that
//                    produced element i (the natural bound for a reordered float sum)
// Each prints the worst element, so a failure on the one GPU run says by how much.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/cuda_device.h"
#include "runtime/kernels.h"
#include "runtime/tensor.h"

namespace tandem::gpu_test {

// Every test derives from this: with no GPU it skips with the reason printed.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  }
  static Device gpu() { return Device::cuda(0); }
  static Kernels& cpu_k() { return kernels_for(Device::cpu()); }
  static Kernels& gpu_k() { return kernels_for(Device::cuda(0)); }
};

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Values on a coarse grid, so windows and rows hold exact ties.
inline std::vector<float> coarse(size_t n, uint32_t seed, int levels = 5) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, levels - 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng)) * 0.5f - 1.f;
  return v;
}

// A device buffer holding `values` (any trivially copyable element type).
template <typename T>
Tensor upload(const std::vector<T>& values, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, dtype, Device::cuda(0));
  if (!values.empty()) device_copy(t.raw(), t.device(), values.data(), Device::cpu(), values.size() * sizeof(T));
  return t;
}
inline Tensor upload(const std::vector<float>& v) { return upload<float>(v, DType::f32); }
inline Tensor upload_i32(const std::vector<int32_t>& v) { return upload<int32_t>(v, DType::i32); }

template <typename T>
std::vector<T> download(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.nbytes() / sizeof(T)));
  if (!out.empty()) device_copy(out.data(), Device::cpu(), t.raw(), t.device(), t.nbytes());
  return out;
}
inline std::vector<float> download(const Tensor& t) { return download<float>(t); }

inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = bits(got[i]) == bits(want[i]) || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
                     << ": got " << got[first] << " want " << want[first];
}

template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
                     << ": got " << +got[first] << " want " << +want[first];
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = abs + rel * std::fabs(static_cast<double>(want[i]));
    const double ratio = std::isnan(err) ? INFINITY : err / bound;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    if (!(err <= bound)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside abs " << abs << " + rel "
                     << rel << "; worst at " << worst << ": got " << got[worst] << " want " << want[worst];
}

// Tolerance relative to the largest |want|: for outputs of sums with cancellation (GEMM).
inline void expect_normwise(const std::vector<float>& got, const std::vector<float>& want, double tol,
                            const std::string& what) {
  double scale = 0;
  for (float w : want) scale = std::fmax(scale, std::fabs(w));
  expect_close(got, want, 0.0, tol * (scale > 0 ? scale : 1.0), what);
}

inline void expect_scaled(const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<double>& scale, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(scale.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol * scale[i] + 1e-30;
    const double ratio = std::isnan(err) ? INFINITY : err / bound;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    if (!(err <= bound)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside " << tol
                     << " x sum|terms|; worst at " << worst << ": got " << got[worst] << " want " << want[worst];
}

// Units in the last place between two finite floats of the same sign region.
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

inline void expect_ulps(const std::vector<float>& got, const std::vector<float>& want, int64_t max_ulps,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, differ = 0, worst = 0;
  int64_t worst_d = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t d = ulp_distance(got[i], want[i]);
    if (d > 0) ++differ;
    if (d > worst_d) worst_d = d, worst = i;
    if (d > max_ulps) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements more than " << max_ulps << " ulp apart; worst " << worst_d
                     << " ulp at " << worst << ": got " << got[worst] << " want " << want[worst];
  if (differ) std::printf("[ info ] %s: %zu of %zu elements differ by <= %lld ulp\n", what.c_str(), differ, got.size(),
                          static_cast<long long>(worst_d));
}

}  // namespace tandem::gpu_test
