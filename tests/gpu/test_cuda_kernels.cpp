// CUDA kernels against the CPU kernels, part 1: GEMM, elementwise ops, reductions,
// dropout and dtype conversion, on the same random inputs.
// Tolerances, and why:
//   GEMM             1e-4 x max|C| (both FP32, no TF32: K products summed in different
//                    orders differ by ~sqrt(K) x 2^-24 of the row's magnitude; K <= 1024)
//   fill, copy, scale, bias adds, relu, mul, dropout (mask and output), f16/bf16
//                    bit-exact: one rounding each, the same on both devices
//   axpy             1e-6 relative: a compiler may fuse alpha*x + y into an FMA or not
//   row/channel sums 1e-5 x sum|terms|: the same terms added in a different order
//   gelu             1e-5 relative + 1e-6 absolute: CUDA's erff/expf are within 2 ulp of
//                    glibc's, and the derivative cancels near x = -0.75
//   sum (double)     1e-12 x sum|x|; count_correct exact
// Sizes: tails that fill no block, 0 and 1 element (no launch of an empty grid), more
// elements than one grid covers (the grid-stride loops wrap), and more than 2^31 elements
// (64-bit index math; skipped where the GPU cannot hold 26 GiB).
#include <limits>
#include <utility>

#include "runtime/cpu/cpu_kernels_impl.h"  // splitmix64_at: dropout masks far into a tensor

#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaKernelsDense : public GpuTest {};

TEST_F(CudaKernelsDense, GemmAllTransposesAndBetas) {
  struct Case {
    int64_t M, N, K;
  };
  for (Case c : {Case{5, 7, 3}, Case{33, 65, 17}, Case{128, 256, 1024}, Case{1000, 10, 784}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 0.5f, 1.f}) {
          const float alpha = 1.5f;
          auto A = randn(c.M * c.K, 1), B = randn(c.K * c.N, 2), C0 = randn(c.M * c.N, 3);
          std::vector<float> want = C0;
          cpu_k().gemm(want.data(), A.data(), B.data(), c.M, c.N, c.K, ta, tb, alpha, beta);
          Tensor dA = upload(A), dB = upload(B), dC = upload(C0);
          gpu_k().gemm(dC.f32(), dA.f32(), dB.f32(), c.M, c.N, c.K, ta, tb, alpha, beta);
          expect_normwise(download(dC), want, 1e-4,
                          "gemm M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                              " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        }
}

// --tf32 (Kernels::set_tf32): TF32 operands (10-bit mantissas, f32 sums) stay within
// 5e-3 x max|C| at K = 1024 (each product off by at most ~2^-10 of |a b|), and switching
// back restores the strict FP32 tolerance above. Skipped on a device without TF32.
TEST_F(CudaKernelsDense, GemmTf32IsOptInAndSwitchesBack) {
  struct StrictAfter {  // the other tests expect strict FP32, whatever happens here
    ~StrictAfter() { kernels_for(Device::cuda(0)).set_tf32(false); }
  } strict_after;
  if (!gpu_k().set_tf32(true)) GTEST_SKIP() << "this device has no TF32 mode (the emulated GPU)";
  const int64_t M = 128, N = 256, K = 1024;
  auto A = randn(M * K, 11), B = randn(K * N, 12);
  std::vector<float> want(M * N, 0.f);
  cpu_k().gemm(want.data(), A.data(), B.data(), M, N, K, false, false, 1.f, 0.f);
  Tensor dA = upload(A), dB = upload(B), dC = upload(std::vector<float>(M * N, 0.f));
  gpu_k().gemm(dC.f32(), dA.f32(), dB.f32(), M, N, K, false, false, 1.f, 0.f);
  expect_normwise(download(dC), want, 5e-3, "gemm under TF32");
  EXPECT_FALSE(gpu_k().set_tf32(false));
  gpu_k().gemm(dC.f32(), dA.f32(), dB.f32(), M, N, K, false, false, 1.f, 0.f);
  expect_normwise(download(dC), want, 1e-4, "gemm strict FP32 again");
}

TEST_F(CudaKernelsDense, GemmBetaZeroIgnoresNaNAndEmptyK) {
  std::vector<float> A(6, 1.f), B(6, 1.f), C(4, std::numeric_limits<float>::quiet_NaN());
  Tensor dA = upload(A), dB = upload(B), dC = upload(C);
  gpu_k().gemm(dC.f32(), dA.f32(), dB.f32(), 2, 2, 3, false, false, 1.f, 0.f);
  expect_bitwise(download(dC), {3.f, 3.f, 3.f, 3.f}, "beta 0 over NaN");
  gpu_k().gemm(dC.f32(), nullptr, nullptr, 2, 2, 0, false, false, 1.f, 0.5f);  // K = 0: C = beta*C
  expect_bitwise(download(dC), {1.5f, 1.5f, 1.5f, 1.5f}, "K = 0");
}

TEST_F(CudaKernelsDense, FillCopyScaleMulAreExact) {
  const int64_t n = 100003;
  auto x = randn(n, 4), y = randn(n, 5);
  Tensor dx = upload(x), dy = upload(y), dout = upload(std::vector<float>(n, 0.f));

  gpu_k().fill(dout.f32(), n, -2.25f);
  expect_bitwise(download(dout), std::vector<float>(n, -2.25f), "fill");

  gpu_k().copy(dout.f32(), dx.f32(), n);
  expect_bitwise(download(dout), x, "copy");

  // Overlapping copy keeps memmove semantics, as the CPU kernel.
  std::vector<float> want = x;
  cpu_k().copy(want.data() + 10, want.data(), n - 10);
  Tensor dover = upload(x);
  gpu_k().copy(dover.f32() + 10, dover.f32(), n - 10);
  expect_bitwise(download(dover), want, "overlapping copy");

  want = x;
  cpu_k().scale(want.data(), n, 0.37f);
  gpu_k().scale(dx.f32(), n, 0.37f);
  expect_bitwise(download(dx), want, "scale");

  std::vector<float> prod(n);
  cpu_k().mul(prod.data(), want.data(), y.data(), n);
  gpu_k().mul(dout.f32(), dx.f32(), dy.f32(), n);
  expect_bitwise(download(dout), prod, "mul");
}

TEST_F(CudaKernelsDense, Axpy) {
  const int64_t n = 100003;
  auto x = randn(n, 6), y = randn(n, 7);
  std::vector<float> want = y;
  cpu_k().axpy(want.data(), x.data(), n, -0.3f);
  Tensor dx = upload(x), dy = upload(y);
  gpu_k().axpy(dy.f32(), dx.f32(), n, -0.3f);
  expect_close(download(dy), want, 1e-6, 1e-7, "axpy");
}

TEST_F(CudaKernelsDense, BiasAddsAreExact) {
  const int64_t rows = 37, cols = 301, n = 3, c = 16, hw = 49;
  auto y = randn(rows * cols, 8), b = randn(cols, 9);
  std::vector<float> want = y;
  cpu_k().add_bias_rows(want.data(), b.data(), rows, cols);
  Tensor dy = upload(y), db = upload(b);
  gpu_k().add_bias_rows(dy.f32(), db.f32(), rows, cols);
  expect_bitwise(download(dy), want, "add_bias_rows");

  auto yc = randn(n * c * hw, 10), bc = randn(c, 11);
  want = yc;
  cpu_k().add_bias_channels(want.data(), bc.data(), n, c, hw);
  Tensor dyc = upload(yc), dbc = upload(bc);
  gpu_k().add_bias_channels(dyc.f32(), dbc.f32(), n, c, hw);
  expect_bitwise(download(dyc), want, "add_bias_channels");
}

TEST_F(CudaKernelsDense, SumRowsAccumulates) {
  // 3 rows: one chunk (adds straight into out); 4097 rows: partials, then an ordered pass;
  // 262145 rows: the chunk count saturates and the last chunks hold no rows.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 300}, {4097, 300}, {262145, 33}}) {
    auto x = randn(rows * cols, 12), out0 = randn(cols, 13);
    std::vector<float> want = out0;
    cpu_k().sum_rows_acc(want.data(), x.data(), rows, cols);
    std::vector<double> scale(cols);
    for (int64_t c = 0; c < cols; ++c) {
      scale[c] = std::fabs(out0[c]);
      for (int64_t r = 0; r < rows; ++r) scale[c] += std::fabs(x[r * cols + c]);
    }
    Tensor dx = upload(x), dout = upload(out0);
    gpu_k().sum_rows_acc(dout.f32(), dx.f32(), rows, cols);
    expect_scaled(download(dout), want, scale, 1e-5, "sum_rows_acc rows=" + std::to_string(rows));
  }
}

TEST_F(CudaKernelsDense, SumChannelsAccumulates) {
  for (int64_t n : {int64_t{2}, int64_t{300}}) {
    const int64_t c = 32, hw = 196;
    auto x = randn(n * c * hw, 14), out0 = randn(c, 15);
    std::vector<float> want = out0;
    cpu_k().sum_channels_acc(want.data(), x.data(), n, c, hw);
    std::vector<double> scale(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      scale[ch] = std::fabs(out0[ch]);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hw; ++j) scale[ch] += std::fabs(x[(i * c + ch) * hw + j]);
    }
    Tensor dx = upload(x), dout = upload(out0);
    gpu_k().sum_channels_acc(dout.f32(), dx.f32(), n, c, hw);
    expect_scaled(download(dout), want, scale, 1e-5, "sum_channels_acc n=" + std::to_string(n));
  }
}

TEST_F(CudaKernelsDense, ReluIsExact) {
  const int64_t n = 65539;
  auto x = coarse(n, 16, 7);  // exact zeros included
  auto dy = randn(n, 17);
  std::vector<float> y(n), dx(n);
  cpu_k().relu_forward(y.data(), x.data(), n);
  cpu_k().relu_backward(dx.data(), dy.data(), y.data(), n);
  Tensor dX = upload(x), dY = upload(std::vector<float>(n)), dDY = upload(dy), dDX = upload(std::vector<float>(n));
  gpu_k().relu_forward(dY.f32(), dX.f32(), n);
  gpu_k().relu_backward(dDX.f32(), dDY.f32(), dY.f32(), n);
  expect_bitwise(download(dY), y, "relu_forward");
  expect_bitwise(download(dDX), dx, "relu_backward");
}

TEST_F(CudaKernelsDense, Gelu) {
  const int64_t n = 65539;
  auto x = randn(n, 18, 2.f), dy = randn(n, 19);
  std::vector<float> y(n), dx(n);
  cpu_k().gelu_forward(y.data(), x.data(), n);
  cpu_k().gelu_backward(dx.data(), dy.data(), x.data(), n);
  Tensor dX = upload(x), dY = upload(std::vector<float>(n)), dDY = upload(dy), dDX = upload(std::vector<float>(n));
  gpu_k().gelu_forward(dY.f32(), dX.f32(), n);
  gpu_k().gelu_backward(dDX.f32(), dDY.f32(), dX.f32(), n);
  expect_close(download(dY), y, 1e-5, 1e-6, "gelu_forward");
  expect_close(download(dDX), dx, 1e-5, 1e-6, "gelu_backward");
}

TEST_F(CudaKernelsDense, DropoutMasksMatchTheCpuBitForBit) {
  const int64_t n = (int64_t{1} << 20) + 3;
  auto x = randn(n, 20);
  Tensor dX = upload(x);
  for (float p : {0.f, 0.1f, 0.5f, 1.f})
    for (uint64_t seed : {uint64_t{0}, uint64_t{12345}, ~uint64_t{0}}) {
      std::vector<float> y(n), mask(n);
      cpu_k().dropout_forward(y.data(), mask.data(), x.data(), n, p, seed);
      Tensor dY = Tensor::empty({n}, DType::f32, gpu()), dM = Tensor::empty({n}, DType::f32, gpu());
      gpu_k().dropout_forward(dY.f32(), dM.f32(), dX.f32(), n, p, seed);
      const std::string what = "p=" + std::to_string(p) + " seed=" + std::to_string(seed);
      expect_bitwise(download(dM), mask, "dropout mask " + what);
      expect_bitwise(download(dY), y, "dropout output " + what);
    }
}

TEST_F(CudaKernelsDense, SumAndCountCorrect) {
  const int64_t n = 1000003;
  auto x = randn(n, 21);
  double abs_sum = 0;
  for (float v : x) abs_sum += std::fabs(v);
  Tensor dx = upload(x);
  EXPECT_NEAR(gpu_k().sum(dx.f32(), n), cpu_k().sum(x.data(), n), 1e-12 * abs_sum);
  EXPECT_EQ(gpu_k().sum(dx.f32(), 0), 0.0);

  const int64_t rows = 5000, classes = 10;
  auto logits = coarse(rows * classes, 22, 4);  // many ties: the first maximum must win
  std::vector<int32_t> labels(rows);
  std::mt19937 rng(23);
  for (auto& l : labels) l = static_cast<int32_t>(rng() % classes);
  Tensor dl = upload(logits), dlab = upload_i32(labels);
  EXPECT_EQ(gpu_k().count_correct(dl.f32(), dlab.data<int32_t>(), rows, classes),
            cpu_k().count_correct(logits.data(), labels.data(), rows, classes));
}

TEST_F(CudaKernelsDense, SumLaterAndTimeMarksReadAfterTheStream) {
  // The deferred sum equals the synchronous one bit for bit (same kernels), even with
  // work queued after it; time marks read a non-negative span.
  const int64_t n = 100003;
  auto x = randn(n, 24);
  Tensor dx = upload(x);
  auto from = gpu_k().mark();
  auto pending = gpu_k().sum_later(dx.f32(), n);
  auto zero = gpu_k().sum_later(dx.f32(), 0);
  gpu_k().scale(dx.f32(), n, 2.f);  // queued after: must not change the pending value
  auto to = gpu_k().mark();
  gpu_k().scale(dx.f32(), n, 0.5f);
  EXPECT_EQ(pending->get(), gpu_k().sum(dx.f32(), n));
  EXPECT_EQ(zero->get(), 0.0);
  EXPECT_GE(gpu_k().elapsed_ms(*from, *to), 0.0);
}

TEST_F(CudaKernelsDense, HalfConversionsAreExact) {
  // Random magnitudes from subnormal to overflow, exact ties, signed zeros and infinities.
  std::vector<float> src = uniform(200000, 24, -1.f, 1.f);
  std::mt19937 rng(25);
  std::uniform_int_distribution<int> e(-30, 17);
  for (float& v : src) v = std::ldexp(v, e(rng));
  for (float v : {0.f, -0.f, 65504.f, 65520.f, 70000.f, 1.f + 1.f / 2048.f, 1.f + 3.f / 2048.f, 5.96e-8f, 2.98e-8f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    src.push_back(v);
  const int64_t n = static_cast<int64_t>(src.size());
  Tensor dsrc = upload(src);

  std::vector<uint16_t> h_cpu(n);
  cpu_k().f32_to_f16(h_cpu.data(), src.data(), n);
  Tensor dh = Tensor::empty({n}, DType::f16, gpu());
  gpu_k().f32_to_f16(dh.data<uint16_t>(), dsrc.f32(), n);
  std::vector<uint16_t> h_gpu = download<uint16_t>(dh);
  // The last input is a NaN: F16C and CUDA may keep different payload bits; both must be NaN.
  auto is_nan16 = [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; };
  EXPECT_TRUE(is_nan16(h_gpu.back()) && is_nan16(h_cpu.back()));
  h_gpu.back() = h_cpu.back() = 0;
  expect_equal(h_gpu, h_cpu, "f32_to_f16");

  std::vector<uint16_t> b_cpu(n);
  cpu_k().f32_to_bf16(b_cpu.data(), src.data(), n);
  Tensor db = Tensor::empty({n}, DType::bf16, gpu());
  gpu_k().f32_to_bf16(db.data<uint16_t>(), dsrc.f32(), n);
  expect_equal(download<uint16_t>(db), b_cpu, "f32_to_bf16 (NaN payload included)");

  // Every 16-bit pattern back to f32.
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  Tensor dall = upload<uint16_t>(all, DType::f16);
  for (int bf = 0; bf < 2; ++bf) {
    std::vector<float> want(65536);
    Tensor dout = Tensor::empty({65536}, DType::f32, gpu());
    if (bf) {
      cpu_k().bf16_to_f32(want.data(), all.data(), 65536);
      gpu_k().bf16_to_f32(dout.f32(), dall.data<uint16_t>(), 65536);
    } else {
      cpu_k().f16_to_f32(want.data(), all.data(), 65536);
      gpu_k().f16_to_f32(dout.f32(), dall.data<uint16_t>(), 65536);
    }
    expect_bitwise(download(dout), want, bf ? "bf16_to_f32 (all patterns)" : "f16_to_f32 (all patterns)");
  }
}

TEST_F(CudaKernelsDense, EmptyAndOneElementSizes) {
  // Zero elements: nothing launched (an empty grid is a launch error), nothing written.
  Tensor guard = upload(std::vector<float>{4.5f});
  float* g = guard.f32();
  gpu_k().fill(g, 0, 1.f);
  gpu_k().copy(g, g + 1, 0);
  gpu_k().scale(g, 0, 2.f);
  gpu_k().axpy(g, g, 0, 1.f);
  gpu_k().mul(g, g, g, 0);
  gpu_k().add_bias_rows(g, g, 0, 1);
  gpu_k().add_bias_rows(g, g, 1, 0);
  gpu_k().add_bias_channels(g, g, 0, 1, 1);
  gpu_k().relu_forward(g, g, 0);
  gpu_k().relu_backward(g, g, g, 0);
  gpu_k().gelu_forward(g, g, 0);
  gpu_k().gelu_backward(g, g, g, 0);
  gpu_k().dropout_forward(g, g, g, 0, 0.5f, 1);
  gpu_k().sum_rows_acc(g, g, 0, 1);
  gpu_k().sum_rows_acc(g, g, 1, 0);
  gpu_k().sum_channels_acc(g, g, 0, 1, 1);
  gpu_k().sum_channels_acc(g, g, 1, 1, 0);  // no pixels: the scratch sizing once divided by hw
  gpu_k().gemm(g, g, g, 0, 1, 1, false, false, 1.f, 0.f);
  gpu_k().gemm(g, g, g, 1, 0, 1, false, false, 1.f, 0.f);
  gpu_k().f32_to_f16(nullptr, g, 0);
  gpu_k().bf16_to_f32(g, nullptr, 0);
  EXPECT_EQ(gpu_k().sum(g, 0), 0.0);
  EXPECT_EQ(gpu_k().count_correct(g, nullptr, 0, 10), 0);
  gpu_k().synchronize();
  expect_bitwise(download(guard), {4.5f}, "untouched by empty calls");

  // One element: one thread of one block, against the CPU.
  const std::vector<float> a = {-1.25f}, b = {0.75f};
  Tensor da = upload(a), db = upload(b), dout = upload(std::vector<float>{2.f});
  std::vector<float> want = {2.f};
  cpu_k().axpy(want.data(), a.data(), 1, 3.f);
  gpu_k().axpy(dout.f32(), da.f32(), 1, 3.f);
  expect_close(download(dout), want, 1e-6, 0, "axpy n=1");
  cpu_k().gemm(want.data(), a.data(), b.data(), 1, 1, 1, true, true, 2.f, 0.5f);
  gpu_k().gemm(dout.f32(), da.f32(), db.f32(), 1, 1, 1, true, true, 2.f, 0.5f);
  expect_close(download(dout), want, 1e-6, 0, "gemm 1x1x1");
  cpu_k().sum_rows_acc(want.data(), b.data(), 1, 1);
  gpu_k().sum_rows_acc(dout.f32(), db.f32(), 1, 1);
  expect_close(download(dout), want, 1e-6, 0, "sum_rows_acc 1x1");
  cpu_k().sum_channels_acc(want.data(), a.data(), 1, 1, 1);
  gpu_k().sum_channels_acc(dout.f32(), da.f32(), 1, 1, 1);
  expect_close(download(dout), want, 1e-6, 0, "sum_channels_acc 1x1x1");
  std::vector<float> y(1), mask(1);
  cpu_k().gelu_forward(y.data(), a.data(), 1);
  gpu_k().gelu_forward(dout.f32(), da.f32(), 1);
  expect_close(download(dout), y, 1e-5, 1e-6, "gelu n=1");
  cpu_k().dropout_forward(y.data(), mask.data(), a.data(), 1, 0.5f, 3);
  Tensor dmask = upload(std::vector<float>{0.f});
  gpu_k().dropout_forward(dout.f32(), dmask.f32(), da.f32(), 1, 0.5f, 3);
  expect_bitwise(download(dout), y, "dropout n=1");
  expect_bitwise(download(dmask), mask, "dropout mask n=1");
  EXPECT_EQ(gpu_k().sum(da.f32(), 1), -1.25);
  Tensor dlab = upload_i32({0});
  EXPECT_EQ(gpu_k().count_correct(da.f32(), dlab.data<int32_t>(), 1, 1), 1);
}

TEST_F(CudaKernelsDense, GridStrideLoopsCoverMoreThanOneGrid) {
  // The launchers cap the grid at 65536 blocks of 256 threads (2^24 elements); past that
  // every thread loops. n ends in a partial block too.
  const int64_t n = (int64_t{1} << 24) + 12345;
  auto x = randn(n, 26);
  Tensor dx = upload(x);
  std::vector<float> want = x;
  cpu_k().scale(want.data(), n, -0.5f);
  Tensor dscaled = upload(x);
  gpu_k().scale(dscaled.f32(), n, -0.5f);
  expect_bitwise(download(dscaled), want, "scale n=2^24+12345");

  std::vector<float> y(n), mask(n);
  cpu_k().dropout_forward(y.data(), mask.data(), x.data(), n, 0.25f, 77);
  Tensor dY = Tensor::empty({n}, DType::f32, gpu()), dM = Tensor::empty({n}, DType::f32, gpu());
  gpu_k().dropout_forward(dY.f32(), dM.f32(), dx.f32(), n, 0.25f, 77);
  expect_bitwise(download(dM), mask, "dropout mask n=2^24+12345");
  expect_bitwise(download(dY), y, "dropout output n=2^24+12345");

  const int64_t rows = 65537, cols = 256;  // 2^24 < rows * cols <= n
  auto bias = randn(cols, 27);
  want.assign(x.begin(), x.begin() + rows * cols);
  cpu_k().add_bias_rows(want.data(), bias.data(), rows, cols);
  Tensor dbias = upload(bias);
  gpu_k().add_bias_rows(dx.f32(), dbias.f32(), rows, cols);
  std::vector<float> got = download(dx);
  got.resize(rows * cols);
  expect_bitwise(got, want, "add_bias_rows 65537x256");

  double abs_sum = 0;
  for (float v : x) abs_sum += std::fabs(v);
  Tensor dx2 = upload(x);
  EXPECT_NEAR(gpu_k().sum(dx2.f32(), n), cpu_k().sum(x.data(), n), 1e-12 * abs_sum);
}

TEST_F(CudaKernelsDense, IndicesPast2To31) {
  // 2^31 + 1000 elements: an index held in 32 bits anywhere would wrap, skip or fault.
  // Results are exact integers (sums of 3s, counts of ones), so no tolerance is needed.
  const int64_t n = (int64_t{1} << 31) + 1000;
  Tensor x, mask, y;
  try {
    x = Tensor::empty({n}, DType::f32, gpu());
    mask = Tensor::empty({n}, DType::f32, gpu());
    y = Tensor::empty({n}, DType::f32, gpu());
  } catch (const std::exception& e) {
    GTEST_SKIP() << "3 x 8 GiB do not fit on this GPU: " << e.what();
  }
  gpu_k().fill(x.f32(), n, 1.f);
  gpu_k().scale(x.f32(), n, 3.f);
  EXPECT_EQ(gpu_k().sum(x.f32(), n), 3.0 * static_cast<double>(n));
  std::vector<float> tail(1000);
  device_copy(tail.data(), Device::cpu(), x.f32() + (n - 1000), gpu(), tail.size() * sizeof(float));
  expect_bitwise(tail, std::vector<float>(1000, 3.f), "scale: the last 1000 elements");

  // The mask of element i hashes the full 64-bit i, as on the CPU.
  gpu_k().dropout_forward(y.f32(), mask.f32(), x.f32(), n, 0.5f, 9);
  device_copy(tail.data(), Device::cpu(), mask.f32() + (n - 1000), gpu(), tail.size() * sizeof(float));
  std::vector<float> want(1000);
  for (int64_t j = 0; j < 1000; ++j) {
    const uint64_t i = static_cast<uint64_t>(n - 1000 + j);
    const float u = static_cast<float>(cpu::baseline::splitmix64_at(9, i) >> 40) * (1.0f / 16777216.0f);
    want[j] = u >= 0.5f ? 2.f : 0.f;
  }
  expect_bitwise(tail, want, "dropout mask: the last 1000 elements");

  // Column sums over 2^31+ elements: (rows, 1000) of ones, so every column sums to rows
  // (2147484 < 2^24: exact in float).
  const int64_t cols = 1000, rows = n / cols;
  gpu_k().fill(x.f32(), rows * cols, 1.f);
  Tensor out = upload(std::vector<float>(cols, 0.f));
  gpu_k().sum_rows_acc(out.f32(), x.f32(), rows, cols);
  expect_bitwise(download(out), std::vector<float>(cols, static_cast<float>(rows)), "sum_rows_acc 2147484x1000");
  x = Tensor();
  mask = Tensor();
  y = Tensor();
  cuda::empty_cache(0);
}

}  // namespace
}  // namespace tandem::gpu_test
