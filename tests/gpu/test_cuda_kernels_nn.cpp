// CUDA kernels against the CPU kernels, part 2: im2col/col2im, max pooling, layer norm,
// softmax cross-entropy, the regression losses (MSE, BCE with logits) and the optimizer
// updates (per tensor and multi-tensor).
// Tolerances, and why:
//   im2col, col2im_acc   bit-exact: copies, and per pixel the same additions in the same order
//   (batched forms too), swap_leading bit-exact (a copy)
//   maxpool fwd/argmax   bit-exact, ties included (the first maximum wins on both)
//   maxpool bwd          bit-exact, overlapping windows included (shared maxima are added
//                        in the CPU's order, without atomics)
//   layernorm            1e-5 relative + 1e-5 absolute for y, mean, rstd, dx (row sums in
//                        another order); dgamma/dbeta 1e-5 x sum|terms|
//   softmax/xent fwd     1e-5 relative + 1e-7 absolute for probabilities, 1e-5 for losses
//                        (expf/logf within 2 ulp of glibc; the row sum over up to 1000
//                        classes in another order)
//   softmax/xent bwd     bit-exact from the same probabilities
//   mse fwd              1e-6 relative (float differences, exact squares, row sums in double
//                        in another order: at most the final rounding differs)
//   mse bwd              bit-exact (the same float operations in the same order)
//   bce-with-logits fwd  1e-5 relative + 1e-6 absolute (expf/log1pf within 2 ulp of glibc)
//   bce-with-logits bwd  1e-6 relative + 4 ulp of 1 x scale/cols absolute (the sigmoid's
//                        expf; sigmoid - t may cancel)
//   the losses and metrics end to end (runtime/layers/regression_loss.h): the same bounds,
//                        and their device checks
//   sgd                  1e-6 relative + 1e-7 absolute (FMA contraction may differ)
//   adamw                at most 1 ulp (both sides spell out every rounding, the CPU body's
//                        three FMAs included, and sqrt and division are correctly rounded
//                        on both: expected bit-exact; the ulp is slack, not a known difference)
// Sizes: rows and planes that leave warps idle, rows past the dgamma chunk cap, 1 class,
// kernels that are not square.
#include <bit>
#include <tuple>
#include <utility>

#include "runtime/layers/regression_loss.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaKernelsNN : public GpuTest {};

struct ConvCase {
  int64_t c, h, w, k, stride, pad;
  int64_t oh() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - k) / stride + 1; }
  std::string str() const {
    return "c=" + std::to_string(c) + " h=" + std::to_string(h) + " w=" + std::to_string(w) + " k=" +
           std::to_string(k) + " s=" + std::to_string(stride) + " p=" + std::to_string(pad);
  }
};

TEST_F(CudaKernelsNN, Im2colAndCol2imAreExact) {
  for (ConvCase cc : {ConvCase{3, 11, 9, 3, 1, 1}, ConvCase{2, 13, 13, 3, 2, 1}, ConvCase{4, 8, 10, 5, 1, 2},
                      ConvCase{1, 28, 28, 3, 1, 1}, ConvCase{2, 9, 7, 2, 3, 0}, ConvCase{1, 5, 5, 4, 2, 3}}) {
    const int64_t rows = cc.c * cc.k * cc.k, cols = cc.oh() * cc.ow();
    auto img = randn(cc.c * cc.h * cc.w, 30);
    std::vector<float> col(rows * cols);
    cpu_k().im2col_batched(col.data(), img.data(), 1, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(), cc.ow());
    Tensor dimg = upload(img), dcol = upload(std::vector<float>(rows * cols, 7.f));
    gpu_k().im2col_batched(dcol.f32(), dimg.f32(), 1, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(), cc.ow());
    expect_bitwise(download(dcol), col, "im2col " + cc.str());

    auto dcol_in = randn(rows * cols, 31);
    auto acc = randn(cc.c * cc.h * cc.w, 32);  // col2im adds into what is there
    std::vector<float> want = acc;
    cpu_k().col2im_batched_acc(want.data(), dcol_in.data(), 1, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(),
                       cc.ow());
    Tensor dacc = upload(acc), dci = upload(dcol_in);
    gpu_k().col2im_batched_acc(dacc.f32(), dci.f32(), 1, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(), cc.ow());
    expect_bitwise(download(dacc), want, "col2im_acc " + cc.str());
  }
}

TEST_F(CudaKernelsNN, BatchedIm2colCol2imAndSwapLeadingAreExact) {
  for (ConvCase cc : {ConvCase{3, 11, 9, 3, 1, 1}, ConvCase{2, 13, 13, 3, 2, 1}, ConvCase{4, 8, 10, 5, 1, 2},
                      ConvCase{2, 9, 7, 2, 3, 0}, ConvCase{3, 5, 4, 1, 1, 0}}) {
    for (int64_t n : {1, 3, 8}) {
      const std::string what = cc.str() + " n=" + std::to_string(n);
      const int64_t rows = cc.c * cc.k * cc.k, cols = n * cc.oh() * cc.ow();
      auto img = randn(n * cc.c * cc.h * cc.w, 33);
      std::vector<float> col(rows * cols);
      cpu_k().im2col_batched(col.data(), img.data(), n, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(),
                             cc.ow());
      Tensor dimg = upload(img), dcol = upload(std::vector<float>(rows * cols, 7.f));
      gpu_k().im2col_batched(dcol.f32(), dimg.f32(), n, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.oh(),
                             cc.ow());
      expect_bitwise(download(dcol), col, "im2col_batched " + what);

      auto dcol_in = randn(rows * cols, 34);
      auto acc = randn(img.size(), 35);  // col2im adds into what is there
      std::vector<float> want = acc;
      cpu_k().col2im_batched_acc(want.data(), dcol_in.data(), n, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad,
                                 cc.oh(), cc.ow());
      Tensor dacc = upload(acc), dci = upload(dcol_in);
      gpu_k().col2im_batched_acc(dacc.f32(), dci.f32(), n, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad,
                                 cc.oh(), cc.ow());
      expect_bitwise(download(dacc), want, "col2im_batched_acc " + what);
    }
  }
  for (auto [a, b, inner] : {std::tuple<int64_t, int64_t, int64_t>{32, 16, 784}, {3, 5, 7}, {1, 9, 4}, {7, 1, 1}}) {
    auto src = randn(a * b * inner, 36);
    std::vector<float> want(src.size());
    cpu_k().swap_leading(want.data(), src.data(), a, b, inner);
    Tensor dsrc = upload(src), ddst = upload(std::vector<float>(src.size(), 7.f));
    gpu_k().swap_leading(ddst.f32(), dsrc.f32(), a, b, inner);
    expect_bitwise(download(ddst), want,
                   "swap_leading " + std::to_string(a) + "x" + std::to_string(b) + "x" + std::to_string(inner));
  }
}

TEST_F(CudaKernelsNN, Im2colAndCol2imWithKernelsThatAreNotSquare) {
  struct Case {
    int64_t n, c, h, w, kh, kw, stride, pad;
  };
  for (Case cc : {Case{2, 3, 9, 8, 3, 2, 2, 1}, Case{3, 2, 5, 11, 1, 4, 1, 0}, Case{1, 1, 6, 6, 5, 2, 3, 2}}) {
    const int64_t oh = (cc.h + 2 * cc.pad - cc.kh) / cc.stride + 1, ow = (cc.w + 2 * cc.pad - cc.kw) / cc.stride + 1;
    const int64_t rows = cc.c * cc.kh * cc.kw, cols = cc.n * oh * ow;
    const std::string what = "kh=" + std::to_string(cc.kh) + " kw=" + std::to_string(cc.kw) + " s=" +
                             std::to_string(cc.stride) + " p=" + std::to_string(cc.pad);
    auto img = randn(cc.n * cc.c * cc.h * cc.w, 37);
    std::vector<float> col(rows * cols);
    cpu_k().im2col_batched(col.data(), img.data(), cc.n, cc.c, cc.h, cc.w, cc.kh, cc.kw, cc.stride, cc.pad, oh, ow);
    Tensor dimg = upload(img), dcol = upload(std::vector<float>(rows * cols, 7.f));
    gpu_k().im2col_batched(dcol.f32(), dimg.f32(), cc.n, cc.c, cc.h, cc.w, cc.kh, cc.kw, cc.stride, cc.pad, oh, ow);
    expect_bitwise(download(dcol), col, "im2col_batched " + what);

    auto dcol_in = randn(rows * cols, 38);
    auto acc = randn(img.size(), 39);
    std::vector<float> want = acc;
    cpu_k().col2im_batched_acc(want.data(), dcol_in.data(), cc.n, cc.c, cc.h, cc.w, cc.kh, cc.kw, cc.stride, cc.pad,
                               oh, ow);
    Tensor dacc = upload(acc), dci = upload(dcol_in);
    gpu_k().col2im_batched_acc(dacc.f32(), dci.f32(), cc.n, cc.c, cc.h, cc.w, cc.kh, cc.kw, cc.stride, cc.pad, oh,
                               ow);
    expect_bitwise(download(dacc), want, "col2im_batched_acc " + what);
  }
}

TEST_F(CudaKernelsNN, MaxPool) {
  struct PoolCase {
    int64_t planes, h, w, k, stride;
  };
  // One warp per plane walks its outputs 32 at a time: plane counts that leave warps idle,
  // shared maxima inside one batch of 32 and across batches (k > stride), one large plane.
  for (PoolCase pc : {PoolCase{64, 28, 28, 2, 2}, PoolCase{7, 13, 11, 3, 2}, PoolCase{5, 9, 9, 3, 1},
                      PoolCase{3, 7, 7, 4, 3}, PoolCase{9, 17, 23, 3, 1}, PoolCase{2, 40, 40, 5, 1},
                      PoolCase{1, 130, 70, 3, 1}, PoolCase{1, 1, 1, 1, 1}}) {
    const int64_t oh = (pc.h - pc.k) / pc.stride + 1, ow = (pc.w - pc.k) / pc.stride + 1;
    const int64_t in_n = pc.planes * pc.h * pc.w, out_n = pc.planes * oh * ow;
    const std::string what = "planes=" + std::to_string(pc.planes) + " " + std::to_string(pc.h) + "x" +
                             std::to_string(pc.w) + " k=" + std::to_string(pc.k) + " s=" + std::to_string(pc.stride);
    auto x = coarse(in_n, 33, 6);  // ties in most windows
    std::vector<float> y(out_n);
    std::vector<int32_t> arg(out_n);
    cpu_k().maxpool_forward(y.data(), arg.data(), x.data(), pc.planes, pc.h, pc.w, pc.k, pc.stride, oh, ow);
    Tensor dx = upload(x), dy = Tensor::empty({out_n}, DType::f32, gpu()), darg = Tensor::empty({out_n}, DType::i32, gpu());
    gpu_k().maxpool_forward(dy.f32(), darg.data<int32_t>(), dx.f32(), pc.planes, pc.h, pc.w, pc.k, pc.stride, oh, ow);
    expect_bitwise(download(dy), y, "maxpool_forward " + what);
    expect_equal(download<int32_t>(darg), arg, "maxpool argmax " + what);

    auto g = randn(out_n, 34);
    std::vector<float> gx(in_n);
    cpu_k().maxpool_backward(gx.data(), g.data(), arg.data(), pc.planes, pc.h, pc.w, oh, ow);
    Tensor dg = upload(g), dgx = upload(std::vector<float>(in_n, 3.f));  // overwritten, not added to
    gpu_k().maxpool_backward(dgx.f32(), dg.f32(), darg.data<int32_t>(), pc.planes, pc.h, pc.w, oh, ow);
    expect_bitwise(download(dgx), gx, "maxpool_backward " + what);
  }
}

TEST_F(CudaKernelsNN, LayerNorm) {
  // 600 rows (> 256): dgamma/dbeta go through partials; one row of one or 33 columns (a
  // lone warp, a tail lane); 262145 rows: the chunk count saturates, the last chunks are empty
  // (32 columns: with 3, some of 262145 rows are so nearly constant that y's 1e-5 cannot hold).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{600, 7}, {600, 300}, {600, 1024}, {1, 1}, {1, 33},
                            {262145, 32}}) {
    const std::string what = " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
    auto x = randn(rows * cols, 35, 3.f), gamma = randn(cols, 36), beta = randn(cols, 37);
    for (float& v : x) v += 5.f;  // a large mean: the two-pass variance must not cancel
    std::vector<float> y(rows * cols), mean(rows), rstd(rows);
    cpu_k().layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols,
                              1e-5f);
    Tensor dX = upload(x), dG = upload(gamma), dB = upload(beta);
    Tensor dY = Tensor::empty({rows * cols}, DType::f32, gpu()), dM = Tensor::empty({rows}, DType::f32, gpu()),
           dR = Tensor::empty({rows}, DType::f32, gpu());
    gpu_k().layernorm_forward(dY.f32(), dM.f32(), dR.f32(), dX.f32(), dG.f32(), dB.f32(), rows, cols, 1e-5f);
    expect_close(download(dY), y, 1e-5, 1e-5, "layernorm y" + what);
    expect_close(download(dM), mean, 1e-5, 1e-5, "layernorm mean" + what);
    expect_close(download(dR), rstd, 1e-5, 1e-5, "layernorm rstd" + what);

    // Backward from the CPU's saved statistics on both devices, so only backward is compared.
    auto dy = randn(rows * cols, 38), dg0 = randn(cols, 39), db0 = randn(cols, 40);
    std::vector<float> dx(rows * cols), dg = dg0, db = db0;
    cpu_k().layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                               rstd.data(), rows, cols);
    Tensor dDY = upload(dy), dDG = upload(dg0), dDB = upload(db0), dMc = upload(mean), dRc = upload(rstd);
    Tensor dDX = Tensor::empty({rows * cols}, DType::f32, gpu());
    gpu_k().layernorm_backward(dDX.f32(), dDG.f32(), dDB.f32(), dDY.f32(), dX.f32(), dG.f32(), dMc.f32(), dRc.f32(),
                               rows, cols);
    expect_close(download(dDX), dx, 1e-5, 1e-5, "layernorm dx" + what);
    std::vector<double> sg(cols), sb(cols);
    for (int64_t c = 0; c < cols; ++c) {
      sg[c] = std::fabs(dg0[c]);
      sb[c] = std::fabs(db0[c]);
      for (int64_t r = 0; r < rows; ++r) {
        const double xhat = (x[r * cols + c] - mean[r]) * rstd[r];
        sg[c] += std::fabs(dy[r * cols + c] * xhat);
        sb[c] += std::fabs(dy[r * cols + c]);
      }
    }
    expect_scaled(download(dDG), dg, sg, 1e-5, "layernorm dgamma" + what);
    expect_scaled(download(dDB), db, sb, 1e-5, "layernorm dbeta" + what);
  }
}

TEST_F(CudaKernelsNN, SoftmaxCrossEntropy) {
  // One class (probability 1, loss 0), a tail lane (33), the usual 10 and 1000; one row.
  for (auto [rows, classes] : {std::pair<int64_t, int64_t>{513, 10}, {513, 1000}, {67, 1}, {67, 33}, {1, 10}}) {
    const std::string what = " rows=" + std::to_string(rows) + " classes=" + std::to_string(classes);
    auto logits = randn(rows * classes, 41, 8.f);
    std::vector<int32_t> labels(rows);
    std::mt19937 rng(42);
    for (auto& l : labels) l = static_cast<int32_t>(rng() % classes);
    std::vector<float> probs(rows * classes), losses(rows);
    cpu_k().softmax_xent_forward(probs.data(), losses.data(), logits.data(), labels.data(), rows, classes);
    Tensor dl = upload(logits), dlab = upload_i32(labels);
    Tensor dp = Tensor::empty({rows * classes}, DType::f32, gpu()), dloss = Tensor::empty({rows}, DType::f32, gpu());
    gpu_k().softmax_xent_forward(dp.f32(), dloss.f32(), dl.f32(), dlab.data<int32_t>(), rows, classes);
    expect_close(download(dp), probs, 1e-5, 1e-7, "softmax probs" + what);
    expect_close(download(dloss), losses, 1e-5, 1e-5, "xent losses" + what);

    std::vector<float> dlogits(rows * classes);
    cpu_k().softmax_xent_backward(dlogits.data(), probs.data(), labels.data(), rows, classes, 1.f / rows);
    Tensor dpc = upload(probs), dd = Tensor::empty({rows * classes}, DType::f32, gpu());
    gpu_k().softmax_xent_backward(dd.f32(), dpc.f32(), dlab.data<int32_t>(), rows, classes, 1.f / rows);
    expect_bitwise(download(dd), dlogits, "xent backward" + what);
  }
}

TEST_F(CudaKernelsNN, BadLabelIsReportedAtTheNextSynchronisation) {
  const int64_t rows = 4, classes = 10;
  Tensor dl = upload(randn(rows * classes, 43)), dlab = upload_i32({1, 2, 10, 3});
  Tensor dp = Tensor::empty({rows * classes}, DType::f32, gpu()), dloss = Tensor::empty({rows}, DType::f32, gpu());
  gpu_k().softmax_xent_forward(dp.f32(), dloss.f32(), dl.f32(), dlab.data<int32_t>(), rows, classes);
  try {
    gpu_k().synchronize();
    FAIL() << "a label outside [0, 10) was not reported";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 in row 2 is outside [0, 10)"), std::string::npos) << e.what();
  }
  gpu_k().synchronize();  // reported once, then cleared
}

TEST_F(CudaKernelsNN, RegressionLosses) {
  // One column, a tail lane (33), an image row (784); rows that leave warps idle; one row.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{513, 10}, {67, 784}, {67, 1}, {129, 33}, {1, 10}}) {
    const std::string what = " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
    const int64_t n = rows * cols;
    auto pred = randn(n, 50, 8.f), target = randn(n, 51, 2.f), probs = uniform(n, 52, 0.f, 1.f);
    for (int64_t i = 0; i < n; i += 7) pred[i] = (i / 7) % 2 ? 30.f : -100.f;  // the stable form's range
    for (int64_t i = 0; i < n; i += 5) probs[i] = static_cast<float>((i / 5) % 2);  // hard targets
    const float scale = 1.f / static_cast<float>(rows);
    Tensor dp = upload(pred), dt = upload(target), dq = upload(probs);
    Tensor dloss = Tensor::empty({rows}, DType::f32, gpu()), dgrad = Tensor::empty({n}, DType::f32, gpu());
    std::vector<float> losses(rows), grad(n);

    cpu_k().mse_forward(losses.data(), pred.data(), target.data(), rows, cols);
    gpu_k().mse_forward(dloss.f32(), dp.f32(), dt.f32(), rows, cols);
    expect_close(download(dloss), losses, 1e-6, 0.0, "mse losses" + what);
    cpu_k().mse_backward(grad.data(), pred.data(), target.data(), rows, cols, scale);
    gpu_k().mse_backward(dgrad.f32(), dp.f32(), dt.f32(), rows, cols, scale);
    expect_bitwise(download(dgrad), grad, "mse backward" + what);

    cpu_k().bce_logits_forward(losses.data(), pred.data(), probs.data(), rows, cols);
    gpu_k().bce_logits_forward(dloss.f32(), dp.f32(), dq.f32(), rows, cols);
    expect_close(download(dloss), losses, 1e-5, 1e-6, "bce losses" + what);
    cpu_k().bce_logits_backward(grad.data(), pred.data(), probs.data(), rows, cols, scale);
    gpu_k().bce_logits_backward(dgrad.f32(), dp.f32(), dq.f32(), rows, cols, scale);
    expect_close(download(dgrad), grad, 1e-6, 4 * 0x1p-24 * scale / static_cast<double>(cols), "bce backward" + what);
  }
}

TEST_F(CudaKernelsNN, RegressionLossesAndMetricsOnTheDevice) {
  const Shape shape{9, 2, 5};
  const int64_t n = shape_numel(shape);
  auto pred = randn(n, 53, 3.f), target = uniform(n, 54, 0.f, 1.f);
  const Tensor host_pred = Tensor::from_vector(pred, shape), host_target = Tensor::from_vector(target, shape);
  const Tensor dev_pred = upload(pred).reshape(shape), dev_target = upload(target).reshape(shape);
  const Tensor ho[] = {host_pred}, ht[] = {host_target}, dout[] = {dev_pred}, dtgt[] = {dev_target};
  MeanSquaredError cpu_mse, gpu_mse;
  BceWithLogits cpu_bce, gpu_bce;
  for (auto [cpu_loss, gpu_loss] : {std::pair<Loss*, Loss*>{&cpu_mse, &gpu_mse}, {&cpu_bce, &gpu_bce}}) {
    const LossSum want = cpu_loss->forward(ho, ht), got = gpu_loss->forward(dout, dtgt);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_NEAR(got.sum->get(), want.sum->get(), 1e-5 * std::fabs(want.sum->get())) << gpu_loss->name();
    const Tensor g = gpu_loss->backward(1.f / 9)[0];
    EXPECT_TRUE(g.device() == gpu());
    expect_close(download(g), cpu_loss->backward(1.f / 9)[0].to_vector(), 1e-6, 1e-9, gpu_loss->name() + " grad");
  }
  MeanSquaredErrorMetric cpu_m, gpu_m;
  cpu_m.add(ho, ht);
  gpu_m.add(dout, dtgt);
  EXPECT_NEAR(gpu_m.value(), cpu_m.value(), 1e-6 * cpu_m.value());
  BinaryAccuracy cpu_a, gpu_a;
  cpu_a.add(ho, ht);
  gpu_a.add(dout, dtgt);  // read back to the host
  EXPECT_EQ(gpu_a.value(), cpu_a.value());
  // Output and target on different devices: named, both ways round.
  const Tensor mixed[] = {host_target};
  try {
    gpu_mse.forward(dout, mixed);
    FAIL() << "a target on the host was accepted for a device output";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MeanSquaredError: target 0 is on cpu but output 0 is on cuda:0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gpu_bce.forward(ho, dtgt), std::invalid_argument);
}

TEST_F(CudaKernelsNN, Sgd) {
  const int64_t n = 100003;
  for (float momentum : {0.f, 0.9f})
    for (float wd : {0.f, 1e-2f})
      for (bool nesterov : {false, true}) {
        if (nesterov && momentum == 0.f) continue;
        const std::string what = "sgd momentum=" + std::to_string(momentum) + " wd=" + std::to_string(wd) +
                                 " nesterov=" + std::to_string(nesterov);
        auto p = randn(n, 44), buf = std::vector<float>(n, 0.f);
        Tensor dp = upload(p), dbuf = upload(buf);
        for (int step = 0; step < 3; ++step) {
          auto g = randn(n, 45 + step);
          Tensor dg = upload(g);
          cpu_k().sgd_update(p.data(), buf.data(), g.data(), n, 0.05f, momentum, wd, nesterov, step == 0);
          gpu_k().sgd_update(dp.f32(), dbuf.f32(), dg.f32(), n, 0.05f, momentum, wd, nesterov, step == 0);
        }
        expect_close(download(dp), p, 1e-6, 1e-7, what + " param");
        if (momentum != 0.f) expect_close(download(dbuf), buf, 1e-6, 1e-7, what + " momentum buffer");
      }
}

TEST_F(CudaKernelsNN, AdamW) {
  const int64_t n = 100003;
  for (float wd : {0.f, 0.01f}) {
    auto p = randn(n, 50), m = std::vector<float>(n, 0.f), v = std::vector<float>(n, 0.f);
    Tensor dp = upload(p), dm = upload(m), dv = upload(v);
    for (int64_t step = 1; step <= 5; ++step) {
      auto g = randn(n, 50 + static_cast<uint32_t>(step));
      Tensor dg = upload(g);
      cpu_k().adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, wd, step);
      gpu_k().adamw_update(dp.f32(), dm.f32(), dv.f32(), dg.f32(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, wd, step);
    }
    const std::string what = "adamw wd=" + std::to_string(wd);
    expect_ulps(download(dp), p, 1, what + " param");
    expect_ulps(download(dm), m, 1, what + " m");
    expect_ulps(download(dv), v, 1, what + " v");
  }
}

// The optimizer's multi-tensor path: 300 tensors (three tables of up to 128 on CUDA, the
// last partial) of sizes from 1 to past a block, updated through one call each, against
// the CPU's per-tensor kernels: AdamW within 1 ulp (as above, per tensor), the squared
// norm to double rounding, and clipping bit for bit (one coefficient, one product each).
TEST_F(CudaKernelsNN, MultiTensorUpdatesAndClippingMatchPerTensor) {
  constexpr int kTensors = 300;
  std::vector<int64_t> sizes;
  for (int i = 0; i < kTensors; ++i) sizes.push_back(1 + (static_cast<int64_t>(i) * 977) % 3001);
  std::vector<std::vector<float>> p, m, v, g;
  std::vector<Tensor> dp, dm, dv, dg;
  for (int i = 0; i < kTensors; ++i) {
    const auto n = static_cast<size_t>(sizes[i]);
    p.push_back(randn(n, 100 + i)), m.push_back(std::vector<float>(n, 0.f)), v.push_back(std::vector<float>(n, 0.f));
    g.push_back(randn(n, 500 + i, 3.f));
    dp.push_back(upload(p[i])), dm.push_back(upload(m[i])), dv.push_back(upload(v[i])), dg.push_back(upload(g[i]));
  }
  // Clipping first: the norm of every gradient, then the scale (max_norm well below it).
  double cpu_sq = 0.0;
  for (int i = 0; i < kTensors; ++i) cpu_k().sum_squares_acc(&cpu_sq, g[i].data(), sizes[i]);
  std::vector<Kernels::Span> spans;
  for (int i = 0; i < kTensors; ++i) spans.push_back({dg[i].f32(), sizes[i]});
  Tensor dsq = Tensor::zeros({1}, DType::i64, gpu_k().device());  // one double's bits
  gpu_k().sum_squares_acc_multi(static_cast<double*>(dsq.raw()), spans.data(), kTensors);
  const double gpu_sq = std::bit_cast<double>(download<int64_t>(dsq)[0]);
  EXPECT_NEAR(gpu_sq, cpu_sq, 1e-12 * cpu_sq) << "sum_squares_acc_multi";
  Tensor dcpu_sq = upload(std::vector<int64_t>{std::bit_cast<int64_t>(cpu_sq)}, DType::i64);
  for (int i = 0; i < kTensors; ++i) cpu_k().clip_scale(g[i].data(), sizes[i], &cpu_sq, 1, 1.0f);
  gpu_k().clip_scale_multi(spans.data(), kTensors, static_cast<const double*>(dcpu_sq.raw()), 1, 1.0f);
  for (int i = 0; i < kTensors; i += 37) expect_bitwise(download(dg[i]), g[i], "clip_scale_multi " + std::to_string(i));
  // AdamW, decay on every other tensor, three steps.
  std::vector<Kernels::UpdateSpan> updates;
  for (int i = 0; i < kTensors; ++i)
    updates.push_back({dp[i].f32(), dm[i].f32(), dv[i].f32(), dg[i].f32(), sizes[i], i % 2 ? 0.1f : 0.f});
  for (int64_t step = 1; step <= 3; ++step) {
    for (int i = 0; i < kTensors; ++i)
      cpu_k().adamw_update(p[i].data(), m[i].data(), v[i].data(), g[i].data(), sizes[i], 1e-3f, 0.9f, 0.99f, 1e-8f,
                           i % 2 ? 0.1f : 0.f, step);
    gpu_k().adamw_update_multi(updates.data(), kTensors, 1e-3f, 0.9f, 0.99f, 1e-8f, step);
  }
  for (int i = 0; i < kTensors; i += 13) {
    expect_ulps(download(dp[i]), p[i], 1, "adamw_update_multi param " + std::to_string(i));
    expect_ulps(download(dm[i]), m[i], 1, "adamw_update_multi m " + std::to_string(i));
  }
  // SGD with momentum and L2 decay over the same tensors, m as the momentum buffer.
  for (Kernels::UpdateSpan& u : updates) u.weight_decay = 1e-2f;
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < kTensors; ++i)
      cpu_k().sgd_update(p[i].data(), m[i].data(), g[i].data(), sizes[i], 0.05f, 0.9f, 1e-2f, true, step == 0);
    gpu_k().sgd_update_multi(updates.data(), kTensors, 0.05f, 0.9f, true, step == 0);
  }
  for (int i = 0; i < kTensors; i += 13)
    expect_close(download(dp[i]), p[i], 1e-6, 1e-7, "sgd_update_multi param " + std::to_string(i));
}

}  // namespace
}  // namespace tandem::gpu_test
