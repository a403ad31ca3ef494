// A small test model with BatchNorm in both forms (tests/unit/test_sync_batchnorm.cpp,
// tests/ddp/batchnorm_worker.cpp), and deterministic batches for it:
//   conv 1->4 3x3 p1 -> bn2d(4) -> relu -> flatten -> fc 100->6 -> bn1d(6) -> relu -> fc 6->3
// over (N, 1, 5, 5) images with 3 classes. The conv and fc1 before a BatchNorm have no bias,
// as torchvision's: BatchNorm subtracts the batch mean, so such a bias's gradient is zero up
// to rounding, and a relative comparison of it would compare rounding noise. Batch `step` of a global batch is the same in
// every process, so each replica can cut its share and a reference can run the whole.
#pragma once

#include <memory>
#include <vector>

#include "runtime/data/loader.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/batchnorm.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/linear.h"
#include "runtime/model.h"
#include "tests/support/compare.h"

namespace tandem::testing {

inline std::unique_ptr<Model> bn_net(uint64_t seed = 7) {
  auto m = std::make_unique<Model>();
  m->add("conv", std::make_unique<Conv2d>(1, 4, 3, 1, 1, false));
  m->add("bn1", std::make_unique<BatchNorm>(BatchNormKind::d2, 4));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(100, 6, false));
  m->add("bn2", std::make_unique<BatchNorm>(BatchNormKind::d1, 6));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(6, 3));
  m->reset_parameters(seed);
  return m;
}

// Rows [first, first + rows) of global batch `step` (inputs not centred: mean 0.3, so the
// running means move).
inline Batch bn_batch(int64_t step, int64_t first, int64_t rows) {
  std::vector<float> x(rows * 25);
  std::vector<int32_t> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (step + 1) + 7919 * (first + r);
    for (int64_t i = 0; i < 25; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[r * 25 + i] = static_cast<float>((s >> 40) % 2001) / 1000.0f - 0.7f;
    }
    y[r] = static_cast<int32_t>((first + r + step) % 3);
  }
  Batch b;
  b.inputs = Tensor::from_vector(x, {rows, 1, 5, 5});
  b.labels = Tensor::empty({rows}, DType::i32);
  for (int64_t r = 0; r < rows; ++r) b.labels.data<int32_t>()[r] = y[r];
  return b;
}

// Gradients and statistics are compared as compare.h's relative_difference.
inline double relative_error(const Tensor& a, const Tensor& b) { return relative_difference(a, b); }

}  // namespace tandem::testing
