// Batch normalisation on CUDA against the CPU: each Kernels::batchnorm_* method, then the
// BatchNorm layer (runtime/layers/batchnorm.h) over train steps and an eval forward.
// Tolerances, and why:
//   stats, backward_sums   1e-6 x sum|terms| (double partials added in another order, then
//                          rounded to float once: at most the float rounding differs);
//                          the count bit-exact
//   train_moments, eval    at most 1 ulp (both sides derive them in double with the same
//   invstd                 operations, FMAs spelled out, from the same stats: expected
//                          bit-exact; the ulp is slack, not a known difference);
//                          num_batches_tracked exact
//   forward, backward_dx   at most 1 ulp from the same moments and sums (the same float
//                          operations with explicit FMAs on both: expected bit-exact)
//   the layer              y, dx, running statistics, parameter gradients and the eval
//                          output 1e-5 relative + 1e-5 absolute (the statistics' sums
//                          round differently, and every later value inherits that)
// Sizes: (N, C) with S = 1, sequences, images, a channel of several chunks of partials
// (N*S past 4096), many chunks, and C = 1.
#include <functional>
#include <memory>

#include "runtime/layers/batchnorm.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaKernelsBatchNorm : public GpuTest {};
class CudaLayersBatchNorm : public GpuTest {};

struct BnCase {
  int64_t n, c, s;
  std::string str() const {
    return " n=" + std::to_string(n) + " c=" + std::to_string(c) + " s=" + std::to_string(s);
  }
  int64_t numel() const { return n * c * s; }
};

const BnCase kCases[] = {{8, 3, 1}, {5, 4, 6}, {4, 3, 25}, {2, 16, 4113}, {300, 7, 1000}, {3, 1, 2}};

// Per channel: sum |a| and sum |a * b| (b null: a^2), the scales of the two sums.
std::vector<double> channel_scales(const std::vector<float>& a, const std::vector<float>* b, const BnCase& bc) {
  std::vector<double> out(static_cast<size_t>(2 * bc.c), 0.0);
  for (int64_t e = 0; e < bc.numel(); ++e) {
    const int64_t ch = (e / bc.s) % bc.c;
    const double v = a[static_cast<size_t>(e)], w = b ? (*b)[static_cast<size_t>(e)] : v;
    out[static_cast<size_t>(ch)] += std::fabs(v);
    out[static_cast<size_t>(bc.c + ch)] += std::fabs(v * w);
  }
  return out;
}

TEST_F(CudaKernelsBatchNorm, ForwardStatisticsMomentsAndNormalisation) {
  for (const BnCase& bc : kCases) {
    const std::string what = bc.str();
    const auto x = randn(static_cast<size_t>(bc.numel()), 80, 2.f);
    std::vector<float> stats(static_cast<size_t>(2 * bc.c + 1));
    cpu_k().batchnorm_stats(stats.data(), x.data(), bc.n, bc.c, bc.s);
    Tensor dX = upload(x), dS = upload(std::vector<float>(stats.size(), 7.f));
    gpu_k().batchnorm_stats(dS.f32(), dX.f32(), bc.n, bc.c, bc.s);
    std::vector<float> got = download(dS);
    EXPECT_EQ(bits(got.back()), bits(stats.back())) << "count" << what;
    got.pop_back();
    expect_scaled(got, std::vector<float>(stats.begin(), stats.end() - 1), channel_scales(x, nullptr, bc), 1e-6,
                  "batchnorm_stats" + what);

    // The moments from the CPU's stats on both devices.
    const size_t c = static_cast<size_t>(bc.c);
    std::vector<float> mean(c), invstd(c), rm = randn(c, 81), rv = uniform(c, 82, 0.5f, 2.f);
    std::vector<int64_t> nbt = {41};
    Tensor dSt = upload(stats), dM = upload(std::vector<float>(c, 7.f)), dI = upload(std::vector<float>(c, 7.f));
    Tensor dRm = upload(rm), dRv = upload(rv), dN = upload<int64_t>(nbt, DType::i64);
    cpu_k().batchnorm_train_moments(mean.data(), invstd.data(), rm.data(), rv.data(), nbt.data(), stats.data(), bc.c,
                                    1e-5f, 0.1f);
    gpu_k().batchnorm_train_moments(dM.f32(), dI.f32(), dRm.f32(), dRv.f32(), dN.data<int64_t>(), dSt.f32(), bc.c,
                                    1e-5f, 0.1f);
    expect_ulps(download(dM), mean, 1, "batchnorm_train_moments mean" + what);
    expect_ulps(download(dI), invstd, 1, "batchnorm_train_moments invstd" + what);
    expect_ulps(download(dRm), rm, 1, "batchnorm_train_moments running_mean" + what);
    expect_ulps(download(dRv), rv, 1, "batchnorm_train_moments running_var" + what);
    expect_equal(download<int64_t>(dN), nbt, "num_batches_tracked" + what);
    EXPECT_EQ(nbt[0], 42);

    std::vector<float> eval_invstd(c);
    Tensor dE = upload(std::vector<float>(c, 7.f));
    cpu_k().batchnorm_eval_invstd(eval_invstd.data(), rv.data(), bc.c, 1e-3f);
    Tensor dRv2 = upload(rv);
    gpu_k().batchnorm_eval_invstd(dE.f32(), dRv2.f32(), bc.c, 1e-3f);
    expect_ulps(download(dE), eval_invstd, 1, "batchnorm_eval_invstd" + what);

    // The normalisation from the same moments, with and without weight and bias.
    const auto w = uniform(c, 83, 0.5f, 1.5f), b = randn(c, 84);
    Tensor dW = upload(w), dB = upload(b), dMc = upload(mean), dIc = upload(invstd);
    for (bool affine : {true, false}) {
      std::vector<float> y(x.size());
      Tensor dY = upload(std::vector<float>(x.size(), 7.f));
      cpu_k().batchnorm_forward(y.data(), x.data(), mean.data(), invstd.data(), affine ? w.data() : nullptr,
                                affine ? b.data() : nullptr, bc.n, bc.c, bc.s);
      gpu_k().batchnorm_forward(dY.f32(), dX.f32(), dMc.f32(), dIc.f32(), affine ? dW.f32() : nullptr,
                                affine ? dB.f32() : nullptr, bc.n, bc.c, bc.s);
      expect_ulps(download(dY), y, 1, std::string("batchnorm_forward") + (affine ? " affine" : "") + what);
    }
  }
}

TEST_F(CudaKernelsBatchNorm, BackwardSumsAndInputGradient) {
  for (const BnCase& bc : kCases) {
    const std::string what = bc.str();
    const size_t c = static_cast<size_t>(bc.c);
    const auto x = randn(static_cast<size_t>(bc.numel()), 90, 1.5f), dy = randn(x.size(), 91);
    const auto mean = randn(c, 92, 0.1f), invstd = uniform(c, 93, 0.5f, 1.5f);
    std::vector<float> sums(2 * c), xhat(x.size());
    for (int64_t e = 0; e < bc.numel(); ++e) {
      const size_t ch = static_cast<size_t>((e / bc.s) % bc.c);
      xhat[static_cast<size_t>(e)] = (x[static_cast<size_t>(e)] - mean[ch]) * invstd[ch];
    }
    cpu_k().batchnorm_backward_sums(sums.data(), dy.data(), x.data(), mean.data(), invstd.data(), bc.n, bc.c, bc.s);
    Tensor dX = upload(x), dDY = upload(dy), dM = upload(mean), dI = upload(invstd);
    Tensor dSums = upload(std::vector<float>(2 * c, 7.f));
    gpu_k().batchnorm_backward_sums(dSums.f32(), dDY.f32(), dX.f32(), dM.f32(), dI.f32(), bc.n, bc.c, bc.s);
    expect_scaled(download(dSums), sums, channel_scales(dy, &xhat, bc), 1e-6, "batchnorm_backward_sums" + what);

    // dx from the CPU's sums; a count as forward's stats would hold it (a replica's or more).
    const std::vector<float> count = {static_cast<float>(2 * bc.n * bc.s)};
    const auto w = uniform(c, 94, 0.5f, 1.5f);
    Tensor dSc = upload(sums), dC = upload(count), dW = upload(w);
    for (bool affine : {true, false}) {
      std::vector<float> dx(x.size());
      Tensor dDX = upload(std::vector<float>(x.size(), 7.f));
      cpu_k().batchnorm_backward_dx(dx.data(), dy.data(), x.data(), mean.data(), invstd.data(),
                                    affine ? w.data() : nullptr, sums.data(), count.data(), bc.n, bc.c, bc.s);
      gpu_k().batchnorm_backward_dx(dDX.f32(), dDY.f32(), dX.f32(), dM.f32(), dI.f32(), affine ? dW.f32() : nullptr,
                                    dSc.f32(), dC.f32(), bc.n, bc.c, bc.s);
      expect_ulps(download(dDX), dx, 1, std::string("batchnorm_backward_dx") + (affine ? " affine" : "") + what);
    }
  }
}

std::vector<float> shifted(std::vector<float> v, float offset) {
  for (float& x : v) x += offset;
  return v;
}

struct BnRun {
  std::vector<std::vector<float>> values;  // per step: y, dx, then the buffers
  std::vector<std::string> names;
  std::vector<int64_t> tracked;
  std::vector<std::vector<float>> grads;
};

BnRun run_batchnorm(BatchNormKind kind, int64_t c, BatchNormOptions options, const std::vector<Shape>& steps,
                    const Shape& eval_shape, Device device) {
  BatchNorm bn(kind, c, options);
  bn.set_prefix("bn");
  uint32_t seed = 95;
  for (Parameter* p : bn.parameters())  // away from 1 and 0, the same on both devices
    p->value.copy_from(Tensor::from_vector(uniform(static_cast<size_t>(c), seed++, 0.5f, 1.5f), {c}));
  bn.to(device);
  BnRun r;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Shape& shape = steps[k];
    const uint32_t seed_k = 100 + static_cast<uint32_t>(k);
    const Tensor x = Tensor::from_vector(shifted(randn(static_cast<size_t>(shape_numel(shape)), seed_k, 2.f), 0.5f),
                                         shape);
    const Tensor dy = Tensor::from_vector(randn(static_cast<size_t>(x.numel()), seed_k + 10), shape);
    const Tensor y = bn.forward(x.to(device));
    const Tensor dx = bn.backward(dy.to(device));
    r.values.push_back(y.to_vector());
    r.names.push_back("y step " + std::to_string(k));
    r.values.push_back(dx.to_vector());
    r.names.push_back("dx step " + std::to_string(k));
    for (int b = 0; b < 2; ++b) {
      r.values.push_back(bn.buffers()[b]->value.to_vector());
      r.names.push_back(bn.buffers()[b]->name + " step " + std::to_string(k));
    }
    r.tracked.push_back(bn.buffers()[2]->value.to(Device::cpu()).data<int64_t>()[0]);
  }
  for (Parameter* p : bn.parameters()) r.grads.push_back(p->grad.to_vector());
  bn.set_training(false);
  const Tensor x = Tensor::from_vector(randn(static_cast<size_t>(shape_numel(eval_shape)), 120, 2.f), eval_shape);
  r.values.push_back(bn.forward(x.to(device)).to_vector());
  r.names.push_back("eval y");
  return r;
}

void compare_batchnorm(BatchNormKind kind, int64_t c, BatchNormOptions options, const std::vector<Shape>& steps,
                       const Shape& eval_shape) {
  const BnRun want = run_batchnorm(kind, c, options, steps, eval_shape, Device::cpu());
  const BnRun got = run_batchnorm(kind, c, options, steps, eval_shape, Device::cuda(0));
  ASSERT_EQ(got.values.size(), want.values.size());
  for (size_t i = 0; i < want.values.size(); ++i) expect_close(got.values[i], want.values[i], 1e-5, 1e-5, want.names[i]);
  EXPECT_EQ(got.tracked, want.tracked);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i)
    expect_close(got.grads[i], want.grads[i], 1e-5, 1e-5, i == 0 ? "grad weight" : "grad bias");
}

TEST_F(CudaLayersBatchNorm, TwoDimensional) {
  compare_batchnorm(BatchNormKind::d2, 3, {}, {{4, 3, 5, 5}, {4, 3, 5, 5}, {2, 3, 7, 6}}, {3, 3, 5, 5});
  compare_batchnorm(BatchNormKind::d2, 16, {}, {{8, 16, 32, 32}}, {2, 16, 32, 32});  // several chunks per channel
  compare_batchnorm(BatchNormKind::d2, 2, BatchNormOptions{1e-3f, 0.3f, false}, {{3, 2, 4, 3}, {3, 2, 4, 3}},
                    {3, 2, 4, 3});
}

TEST_F(CudaLayersBatchNorm, OneDimensional) {
  compare_batchnorm(BatchNormKind::d1, 4, {}, {{8, 4}, {5, 4, 6}}, {3, 4, 6});
  compare_batchnorm(BatchNormKind::d1, 300, {}, {{64, 300}, {64, 300}}, {16, 300});
}

}  // namespace
}  // namespace tandem::gpu_test
