// Every layer's forward and backward on CUDA against the same layer on the CPU: same
// parameters (init depends only on seed and name), same input, same output gradient.
// Tolerances follow the kernels underneath (test_cuda_kernels*.cpp): 1e-4 x max|value|
// for anything that goes through a GEMM (Linear, Conv2d), exact for ReLU, MaxPool
// (overlapping windows too), Dropout and Flatten, 1e-5 for LayerNorm, GELU and the loss.
#include <functional>
#include <memory>

#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/maxpool2d.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

struct LayerResult {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;  // in parameter order
  std::vector<std::string> names;
};

// Runs `forwards` forward/backward pairs of a fresh layer on `device`.
LayerResult run_layer(const std::function<std::unique_ptr<Module>()>& make, Device device, const Shape& x_shape,
                      int forwards = 1) {
  std::unique_ptr<Module> m = make();
  m->set_prefix("layer");
  m->reset_parameters(7);
  m->to(device);
  LayerResult r;
  for (int f = 0; f < forwards; ++f) {
    Tensor x = Tensor::from_vector(randn(shape_numel(x_shape), 60 + f), x_shape).to(device);
    Tensor y = m->forward(x);
    Tensor dy = Tensor::from_vector(randn(y.numel(), 70 + f), y.shape()).to(device);
    Tensor dx = m->backward(dy);
    std::vector<float> yv = y.to_vector(), dxv = dx.to_vector();
    r.y.insert(r.y.end(), yv.begin(), yv.end());
    r.dx.insert(r.dx.end(), dxv.begin(), dxv.end());
  }
  for (Parameter* p : m->parameters()) {
    r.grads.push_back(p->grad.to_vector());
    r.names.push_back(p->name);
  }
  return r;
}

enum class Tol { exact, gemm, smooth };

void compare_layer(const std::string& what, const std::function<std::unique_ptr<Module>()>& make, const Shape& x_shape,
                   Tol y_tol, Tol dx_tol, Tol grad_tol, int forwards = 1) {
  SCOPED_TRACE(what);
  LayerResult c = run_layer(make, Device::cpu(), x_shape, forwards);
  LayerResult g = run_layer(make, Device::cuda(0), x_shape, forwards);
  auto check = [&](const std::vector<float>& got, const std::vector<float>& want, Tol t, const std::string& name) {
    switch (t) {
      case Tol::exact: expect_bitwise(got, want, what + " " + name); break;
      case Tol::gemm: expect_normwise(got, want, 1e-4, what + " " + name); break;
      case Tol::smooth: expect_close(got, want, 1e-5, 1e-5, what + " " + name); break;
    }
  };
  check(g.y, c.y, y_tol, "output");
  check(g.dx, c.dx, dx_tol, "input gradient");
  ASSERT_EQ(g.grads.size(), c.grads.size());
  for (size_t i = 0; i < c.grads.size(); ++i) check(g.grads[i], c.grads[i], grad_tol, c.names[i] + " gradient");
}

class CudaLayers : public GpuTest {};

TEST_F(CudaLayers, Linear) {
  compare_layer("Linear(300, 70)", [] { return std::make_unique<Linear>(300, 70); }, {33, 300}, Tol::gemm, Tol::gemm,
                Tol::gemm);
  compare_layer("Linear(784, 1024), batch 256", [] { return std::make_unique<Linear>(784, 1024); }, {256, 784},
                Tol::gemm, Tol::gemm, Tol::gemm);
}

TEST_F(CudaLayers, Conv2d) {
  compare_layer("Conv2d(3, 8, k3, s2, p1)", [] { return std::make_unique<Conv2d>(3, 8, 3, 2, 1); }, {4, 3, 13, 11},
                Tol::gemm, Tol::gemm, Tol::gemm);
  compare_layer("Conv2d(1, 32, k3, s1, p1)", [] { return std::make_unique<Conv2d>(1, 32, 3, 1, 1); }, {8, 1, 28, 28},
                Tol::gemm, Tol::gemm, Tol::gemm);
  compare_layer("Conv2d(4, 6, k1) direct", [] { return std::make_unique<Conv2d>(4, 6, 1); }, {3, 4, 7, 5}, Tol::gemm,
                Tol::gemm, Tol::gemm);
  compare_layer(
      "Conv2d(2, 5, k5, s1, p2) recomputing columns",
      [] {
        auto c = std::make_unique<Conv2d>(2, 5, 5, 1, 2);
        c->set_saved_columns_limit(0);
        return c;
      },
      {3, 2, 9, 8}, Tol::gemm, Tol::gemm, Tol::gemm);
  // Chunks of 2 + 2 + 1 images on both devices (the GPU default is one chunk, the CPU's one image).
  compare_layer(
      "Conv2d(3, 4, k3, s1, p1) in chunks of two images",
      [] {
        auto c = std::make_unique<Conv2d>(3, 4, 3, 1, 1);
        c->set_chunk_limit(2 * 27 * 10 * 6 * sizeof(float));
        return c;
      },
      {5, 3, 10, 6}, Tol::gemm, Tol::gemm, Tol::gemm);
}

TEST_F(CudaLayers, MaxPool2d) {
  compare_layer("MaxPool2d(2)", [] { return std::make_unique<MaxPool2d>(2); }, {4, 8, 12, 12}, Tol::exact,
                Tol::exact, Tol::exact);
  compare_layer("MaxPool2d(3, stride 2) overlapping", [] { return std::make_unique<MaxPool2d>(3, 2); },
                {2, 3, 11, 9}, Tol::exact, Tol::exact, Tol::exact);
}

TEST_F(CudaLayers, LayerNormGeluReluFlatten) {
  compare_layer("LayerNorm(64)", [] { return std::make_unique<LayerNorm>(64); }, {50, 64}, Tol::smooth, Tol::smooth,
                Tol::smooth);
  compare_layer("GELU", [] { return std::make_unique<GELU>(); }, {17, 33}, Tol::smooth, Tol::smooth, Tol::exact);
  compare_layer("ReLU", [] { return std::make_unique<ReLU>(); }, {17, 33}, Tol::exact, Tol::exact, Tol::exact);
  compare_layer("Flatten", [] { return std::make_unique<Flatten>(); }, {5, 3, 4, 4}, Tol::exact, Tol::exact,
                Tol::exact);
}

TEST_F(CudaLayers, DropoutDrawsTheSameMasksStepAfterStep) {
  compare_layer("Dropout(0.3)", [] { return std::make_unique<Dropout>(0.3f, 99); }, {64, 257}, Tol::exact,
                Tol::exact, Tol::exact, /*forwards=*/3);
}

TEST_F(CudaLayers, SoftmaxCrossEntropy) {
  const int64_t rows = 300, classes = 10;
  auto logits = randn(rows * classes, 80, 3.f);
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>((r * 7) % classes);
  Tensor lc = Tensor::from_vector(logits, {rows, classes});
  Tensor yc = Tensor::empty({rows}, DType::i32);
  std::memcpy(yc.raw(), labels.data(), labels.size() * sizeof(int32_t));
  SoftmaxCrossEntropy cpu_loss, gpu_loss;
  const double lcpu = cpu_loss.forward(lc, yc);
  const double lgpu = gpu_loss.forward(lc.to(gpu()), yc.to(gpu()));
  EXPECT_NEAR(lgpu, lcpu, 1e-6 * std::fabs(lcpu));
  expect_close(gpu_loss.dlogits(1.f / rows).to_vector(), cpu_loss.dlogits(1.f / rows).to_vector(), 1e-5, 1e-8,
               "dlogits");
  EXPECT_EQ(SoftmaxCrossEntropy::count_correct(lc.to(gpu()), yc.to(gpu())),
            SoftmaxCrossEntropy::count_correct(lc, yc));
}

}  // namespace
}  // namespace tandem::gpu_test
