// CUDA transformer kernels against the CPU ones: embedding, causal attention, GELU-tanh,
// sum of squares and clip_scale, plus the determinism every kernel here promises (the
// same call twice gives the same bits).
// Tolerances, and why:
//   embedding fwd / bwd  bit-exact: copies, and per table element the same additions in
//                        the same (increasing n) order, repeated ids included
//   attention att        1e-5 relative + 1e-6 absolute (q.k dots in another order; expf vs
//                        the CPU's polynomial exp, each within 2 ulp); masked entries
//                        exactly 0 on both
//   attention out, dqkv  1e-4 relative + 5e-5 absolute: sums of up to T = 200 products of
//                        O(1) values in another order, through the softmax's rounding
//                        (the tiled kernels too, and their lse: rescaled running sums in
//                        another order, expf and logf vs the CPU's)
//   gelu_tanh fwd        1e-5 relative + 1e-7 absolute (expf within 2 ulp, amplified by
//                        ~|u| in the tail where y ~ 0; FMA contraction on the GPU)
//   gelu_tanh bwd        1e-5 relative + 2e-6 absolute (as forward; the derivative
//                        crosses 0 near x = -0.75, where only an absolute bound is meaningful)
//   sum_squares_acc      at most 1 ulp: both sum in double, so the float result is the
//                        correctly rounded sum unless it lands next to a tie
//   clip_scale           bit-exact: the coefficient is max_norm / (sqrt(s) + 1e-6) with IEEE
//                        float operations on both, and each element one multiplication
#include <cstring>
#include <stdexcept>
#include <string>

#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaTransformerKernels : public GpuTest {};

struct AttnShape {
  int64_t b, t, c, nh;
  std::string str() const {
    return "B=" + std::to_string(b) + " T=" + std::to_string(t) + " C=" + std::to_string(c) +
           " NH=" + std::to_string(nh);
  }
};

// T = 1, NH = 1, HS = 5 (not a multiple of 8), B > 1, the small GPT's shape, and T past
// one block of row threads.
const AttnShape kShapes[] = {{1, 1, 4, 1}, {2, 7, 15, 3}, {3, 9, 24, 1}, {12, 64, 128, 4}, {1, 200, 64, 2}};

TEST_F(CudaTransformerKernels, EmbeddingIsExact) {
  const int64_t V = 1000;
  for (int64_t C : {96, 130}) {
    const int64_t N = 768;
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 37 + i / 5) % 61);  // many repeats
    ids[N - 1] = static_cast<int32_t>(V - 1);
    const auto table = randn(V * C, 1);
    std::vector<float> out(N * C);
    cpu_k().embedding_forward(out.data(), table.data(), ids.data(), N, C);
    Tensor dtab = upload(table), dids = upload_i32(ids), dout = upload(std::vector<float>(N * C, 7.f));
    gpu_k().embedding_forward(dout.f32(), dtab.f32(), dids.data<int32_t>(), N, C);
    expect_bitwise(download(dout), out, "embedding_forward C=" + std::to_string(C));

    auto grad = randn(N * C, 2);
    for (int64_t i = 0; i < N * C; ++i) grad[i] *= static_cast<float>(1 + i % 7) * 0.37f;  // order-sensitive sums
    const auto acc = randn(V * C, 3);  // embedding_backward_acc adds into what is there
    std::vector<float> want = acc;
    cpu_k().embedding_backward_acc(want.data(), grad.data(), ids.data(), N, C, V);
    Tensor dacc = upload(acc), dgrad = upload(grad);
    gpu_k().embedding_backward_acc(dacc.f32(), dgrad.f32(), dids.data<int32_t>(), N, C, V);
    expect_bitwise(download(dacc), want, "embedding_backward_acc C=" + std::to_string(C));
  }
}

TEST_F(CudaTransformerKernels, AttentionForwardMatchesCpu) {
  for (const AttnShape& s : kShapes) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 10, 1.5f);
    std::vector<float> out(s.b * s.t * s.c), att(s.b * s.nh * s.t * s.t);
    cpu_k().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    Tensor dqkv = upload(qkv), dout = upload(std::vector<float>(out.size(), 7.f)),
           datt = upload(std::vector<float>(att.size(), 7.f));
    gpu_k().attention_forward(dout.f32(), datt.f32(), dqkv.f32(), s.b, s.t, s.c, s.nh);
    const auto got_att = download(datt);
    expect_close(got_att, att, 1e-5, 1e-6, "att " + s.str());
    expect_close(download(dout), out, 1e-4, 5e-5, "out " + s.str());
    size_t nonzero_masked = 0;
    for (int64_t r = 0; r < s.b * s.nh * s.t; ++r)
      for (int64_t j = r % s.t + 1; j < s.t; ++j) nonzero_masked += got_att[r * s.t + j] != 0.f;
    EXPECT_EQ(nonzero_masked, 0u) << s.str();
  }
}

// The flash-style kernels against the CPU's tiled kernel (itself held to the double
// references and the fused kernel in tests/unit), HS = 4, 5, 24, 32, 64 and 128 (each
// register width), T crossing the 64-row and 32-column tiles; backward twice, same bits.
TEST_F(CudaTransformerKernels, TiledAttentionMatchesCpuAndIsDeterministic) {
  const AttnShape shapes[] = {{1, 1, 4, 1},    {2, 7, 15, 3},   {3, 9, 24, 1},  {12, 64, 128, 4},
                              {1, 200, 64, 2}, {2, 97, 256, 2}, {2, 70, 192, 3}};
  for (const AttnShape& s : shapes) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 30, 1.5f);
    const auto grad = randn(s.b * s.t * s.c, 31);
    std::vector<float> out(s.b * s.t * s.c), lse(s.b * s.nh * s.t), dqkv(qkv.size());
    cpu_k().attention_forward_tiled(out.data(), lse.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    cpu_k().attention_backward_tiled(dqkv.data(), grad.data(), qkv.data(), out.data(), lse.data(), s.b, s.t, s.c,
                                     s.nh);
    Tensor g_qkv = upload(qkv), g_out = upload(std::vector<float>(out.size(), 7.f)),
           g_lse = upload(std::vector<float>(lse.size(), 7.f));
    gpu_k().attention_forward_tiled(g_out.f32(), g_lse.f32(), g_qkv.f32(), s.b, s.t, s.c, s.nh);
    expect_close(download(g_out), out, 1e-4, 5e-5, "tiled out " + s.str());
    expect_close(download(g_lse), lse, 1e-4, 5e-5, "tiled lse " + s.str());
    // Backward from the CPU's out and lse, so only the backward's own differences show.
    Tensor c_out = upload(out), c_lse = upload(lse), g_grad = upload(grad);
    Tensor g_dqkv = upload(std::vector<float>(qkv.size(), 7.f));
    gpu_k().attention_backward_tiled(g_dqkv.f32(), g_grad.f32(), g_qkv.f32(), c_out.f32(), c_lse.f32(), s.b, s.t, s.c,
                                     s.nh);
    const auto first = download(g_dqkv);
    expect_close(first, dqkv, 1e-4, 5e-5, "tiled dqkv " + s.str());
    gpu_k().attention_backward_tiled(g_dqkv.f32(), g_grad.f32(), g_qkv.f32(), c_out.f32(), c_lse.f32(), s.b, s.t, s.c,
                                     s.nh);
    expect_bitwise(download(g_dqkv), first, "tiled dqkv rerun " + s.str());
  }
}

// A head wider than the kernels' registers is refused by name, before any launch (the
// emulated GPU runs the CPU's tiled kernel, which has no such limit: it skips this test).
TEST_F(CudaTransformerKernels, TiledAttentionRefusesAHeadWiderThanItsRegisters) {
  Tensor g_qkv = upload(std::vector<float>(1 * 2 * 3 * 258, 0.f)), g_out = upload(std::vector<float>(2 * 258)),
         g_lse = upload(std::vector<float>(2));
  try {
    gpu_k().attention_forward_tiled(g_out.f32(), g_lse.f32(), g_qkv.f32(), 1, 2, 258, 1);
    ADD_FAILURE() << "HS = 258 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head size C / NH = 258"), std::string::npos) << e.what();
  }
}

TEST_F(CudaTransformerKernels, AttentionBackwardMatchesCpuAndIsDeterministic) {
  for (const AttnShape& s : kShapes) {
    const auto qkv = randn(s.b * s.t * 3 * s.c, 20);
    const auto grad = randn(s.b * s.t * s.c, 21);
    std::vector<float> out(s.b * s.t * s.c), att(s.b * s.nh * s.t * s.t);
    cpu_k().attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.c, s.nh);
    std::vector<float> dqkv(qkv.size()), datt(att.size());
    cpu_k().attention_backward(dqkv.data(), datt.data(), grad.data(), qkv.data(), att.data(), s.b, s.t, s.c, s.nh);
    // The GPU starts from the CPU's att, so only the backward's own differences show.
    Tensor g_qkv = upload(qkv), g_att = upload(att), g_grad = upload(grad);
    Tensor g_dqkv = upload(std::vector<float>(qkv.size(), 7.f)), g_datt = upload(std::vector<float>(att.size(), 7.f));
    gpu_k().attention_backward(g_dqkv.f32(), g_datt.f32(), g_grad.f32(), g_qkv.f32(), g_att.f32(), s.b, s.t, s.c,
                               s.nh);
    const auto first = download(g_dqkv);
    expect_close(first, dqkv, 1e-4, 5e-5, "dqkv " + s.str());
    gpu_k().attention_backward(g_dqkv.f32(), g_datt.f32(), g_grad.f32(), g_qkv.f32(), g_att.f32(), s.b, s.t, s.c,
                               s.nh);
    expect_bitwise(download(g_dqkv), first, "dqkv rerun " + s.str());
  }
}

TEST_F(CudaTransformerKernels, GeluTanhMatchesCpu) {
  const int64_t n = 100003;  // past one block, odd tail
  auto x = uniform(static_cast<size_t>(n), 30, -12.f, 12.f);
  x[0] = 0.f, x[1] = -90.f, x[2] = 90.f;
  const auto dy = randn(static_cast<size_t>(n), 31);
  std::vector<float> y(n), dx(n);
  cpu_k().gelu_tanh_forward(y.data(), x.data(), n);
  cpu_k().gelu_tanh_backward(dx.data(), dy.data(), x.data(), n);
  Tensor gx = upload(x), gdy = upload(dy), gy = upload(std::vector<float>(n, 7.f)),
         gdx = upload(std::vector<float>(n, 7.f));
  gpu_k().gelu_tanh_forward(gy.f32(), gx.f32(), n);
  gpu_k().gelu_tanh_backward(gdx.f32(), gdy.f32(), gx.f32(), n);
  expect_close(download(gy), y, 1e-5, 1e-7, "gelu_tanh_forward");
  expect_close(download(gdx), dx, 1e-5, 2e-6, "gelu_tanh_backward");
}

// The kernels' double accumulators, as i64 tensors (Tensor has no f64; the bits are a double's).
Tensor upload_f64(const std::vector<double>& v) {
  std::vector<int64_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * sizeof(double));
  return upload<int64_t>(bits, DType::i64);
}
double download_f64(const Tensor& t) {
  const auto bits = download<int64_t>(t);
  double d;
  std::memcpy(&d, bits.data(), sizeof d);
  return d;
}

TEST_F(CudaTransformerKernels, SumSquaresMatchesCpuAndIsDeterministic) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3, int64_t{5} << 20}) {
    const auto x = randn(static_cast<size_t>(n), 40, 0.1f);
    double want = 0.25;
    cpu_k().sum_squares_acc(&want, x.data(), n);
    Tensor gx = upload(x), gout = upload_f64({0.25});
    gpu_k().sum_squares_acc(static_cast<double*>(gout.raw()), gx.f32(), n);
    const double first = download_f64(gout);
    // Both sum in double, in other orders: the float of the sum within 1 ulp.
    expect_ulps({static_cast<float>(first)}, {static_cast<float>(want)}, 1, "sum_squares_acc n=" + std::to_string(n));
    Tensor again = upload_f64({0.25});
    gpu_k().sum_squares_acc(static_cast<double*>(again.raw()), gx.f32(), n);
    const double rerun = download_f64(again);
    EXPECT_EQ(0, std::memcmp(&first, &rerun, sizeof first)) << "sum_squares_acc rerun n=" << n;
  }
}

TEST_F(CudaTransformerKernels, ClipScaleIsExact) {
  const int64_t n = 70001;
  const auto x = randn(static_cast<size_t>(n), 50);
  // max_norm 2: untouched, then scaled; the last two as parts added in order (ZeRO's ranks).
  const std::vector<std::vector<double>> cases = {{0.0}, {3.99}, {4.0}, {100.0}, {12345.6}, {1.5, 98.5}, {1e-3, 7.0, 2.5}};
  for (const auto& sum_sq : cases) {
    std::vector<float> want = x;
    const int64_t parts = static_cast<int64_t>(sum_sq.size());
    cpu_k().clip_scale(want.data(), n, sum_sq.data(), parts, 2.f);
    Tensor gx = upload(x), gs = upload_f64(sum_sq);
    gpu_k().clip_scale(gx.f32(), n, static_cast<const double*>(gs.raw()), parts, 2.f);
    expect_bitwise(download(gx), want, "clip_scale sum_sq=" + std::to_string(sum_sq[0]) + " parts " + std::to_string(parts));
  }
}

}  // namespace
}  // namespace tandem::gpu_test
