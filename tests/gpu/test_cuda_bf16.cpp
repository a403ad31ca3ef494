// bf16 mixed precision on CUDA against the CPU (docs/precision.md): cuBLAS's bf16 GEMM
// (cublasGemmEx, f32 compute) against the CPU's bf16 GEMM on the same bf16 operands, for
// every transposition and beta; then Linear, Conv2d and attention under Precision::bf16 on both.
// Tolerances: both devices form the same exact products of bf16 values and sum them in
// f32 in different orders, so GEMM outputs agree within 2e-5 x sum|a b| (expect_scaled),
// and layers within 1e-4 x max|value| as the f32 layers do (test_cuda_layers.cpp).
#include <functional>
#include <memory>

#include "runtime/layers/attention.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/linear.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaBf16 : public GpuTest {};

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& f) {
  std::vector<uint16_t> b(f.size());
  kernels_for(Device::cpu()).f32_to_bf16(b.data(), f.data(), static_cast<int64_t>(f.size()));
  return b;
}

float widen(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_F(CudaBf16, GemmMatchesTheCpuForEveryTransposeAndBeta) {
  struct Case {
    int64_t M, N, K;
  };
  for (Case c : {Case{5, 7, 3}, Case{33, 65, 17}, Case{128, 512, 784}, Case{768, 384, 128}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 1.f}) {
          const float alpha = 0.5f;
          const auto A = to_bf16_bits(randn(c.M * c.K, 1)), B = to_bf16_bits(randn(c.K * c.N, 2));
          const auto C0 = randn(c.M * c.N, 3);
          std::vector<float> want = C0;
          cpu_k().gemm_bf16(want.data(), A.data(), B.data(), c.M, c.N, c.K, ta, tb, alpha, beta);
          Tensor dA = upload<uint16_t>(A, DType::bf16), dB = upload<uint16_t>(B, DType::bf16), dC = upload(C0);
          gpu_k().gemm_bf16(dC.f32(), dA.data<uint16_t>(), dB.data<uint16_t>(), c.M, c.N, c.K, ta, tb, alpha, beta);
          std::vector<double> scale(static_cast<size_t>(c.M * c.N));
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
              double s = beta * std::fabs(C0[static_cast<size_t>(m * c.N + n)]);
              for (int64_t k = 0; k < c.K; ++k)
                s += alpha * std::fabs(widen(A[static_cast<size_t>(ta ? k * c.M + m : m * c.K + k)]) *
                                       widen(B[static_cast<size_t>(tb ? n * c.K + k : k * c.N + n)]));
              scale[static_cast<size_t>(m * c.N + n)] = s;
            }
          expect_scaled(download(dC), want, scale, 2e-5,
                        "gemm_bf16 M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" +
                            std::to_string(c.K) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                            " beta=" + std::to_string(beta));
        }
}

// Output, input gradient and parameter gradients of a fresh layer under bf16 on `device`.
std::vector<std::vector<float>> run_bf16(const std::function<std::unique_ptr<Module>()>& make, Device device,
                                         const Shape& x_shape) {
  std::unique_ptr<Module> m = make();
  m->set_prefix("layer");
  m->reset_parameters(7);
  m->to(device);
  m->set_precision(Precision::bf16);
  Tensor x = Tensor::from_vector(randn(shape_numel(x_shape), 60), x_shape).to(device);
  Tensor y = m->forward(x);
  Tensor dy = Tensor::from_vector(randn(y.numel(), 70), y.shape()).to(device);
  std::vector<std::vector<float>> out = {y.to_vector(), m->backward(dy).to_vector()};
  for (Parameter* p : m->parameters()) out.push_back(p->grad.to_vector());
  return out;
}

TEST_F(CudaBf16, LayersMatchTheCpuUnderBf16) {
  // Attention under bf16 is the batched composition on both devices (cuBLAS's
  // GemmStridedBatchedEx here, gemm_bf16 per head on the CPU); att and dpre are rounded to
  // bf16 after f32 sums in different orders, so an element may round one bf16 ulp apart:
  // a looser bound than the GEMM layers'.
  struct Case {
    std::string name;
    std::function<std::unique_ptr<Module>()> make;
    Shape x;
    double tol;
  };
  const Case cases[] = {
      {"Linear(300, 70)", [] { return std::make_unique<Linear>(300, 70); }, {33, 300}, 1e-4},
      {"Conv2d(3, 16, 3, 1, 1)", [] { return std::make_unique<Conv2d>(3, 16, 3, 1, 1); }, {4, 3, 12, 12}, 1e-4},
      {"CausalSelfAttention(48, 6)", [] { return std::make_unique<CausalSelfAttention>(48, 6); }, {3, 20, 48}, 2e-3},
  };
  for (const Case& l : cases) {
    SCOPED_TRACE(l.name);
    const auto c = run_bf16(l.make, Device::cpu(), l.x);
    const auto g = run_bf16(l.make, gpu(), l.x);
    ASSERT_EQ(c.size(), g.size());
    for (size_t j = 0; j < c.size(); ++j) expect_normwise(g[j], c[j], l.tol, l.name + " value " + std::to_string(j));
  }
}

}  // namespace
}  // namespace tandem::gpu_test
