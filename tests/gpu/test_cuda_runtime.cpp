// The CUDA device as the runtime sees it: Tensor::to round trips (every dtype, views,
// copies larger than a staging slot, peer copies), the caching allocator (no cudaMalloc
// once a training loop is warm), device errors, and a model trained for 10 steps on
// CUDA and on the CPU from the same start (parameters within 1e-4 x max|parameter|:
// ten steps of GEMM-rounding differences, each ~1e-6, well inside it).
#include <memory>

#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

class CudaRuntime : public GpuTest {};

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  const uint8_t* p = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

TEST_F(CudaRuntime, TensorRoundTripsEveryDtypeBitForBit) {
  std::mt19937 rng(1);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    Tensor h = Tensor::empty({3, 1001}, d);
    uint8_t* p = static_cast<uint8_t*>(h.raw());
    for (size_t i = 0; i < h.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
    Tensor g = h.to(gpu());
    EXPECT_EQ(g.device(), gpu());
    Tensor g2 = g.clone();  // device to device
    expect_equal(raw_bytes(g2), raw_bytes(h), std::string("round trip ") + dtype_name(d));
  }
}

TEST_F(CudaRuntime, ViewsZerosAndCopyFrom) {
  auto v = randn(10000, 2);
  Tensor h = Tensor::from_vector(v, {100, 100});
  Tensor g = h.to(gpu());
  // A view at an offset, copied back and across.
  Tensor gv = g.view(1234, {50, 7});
  std::vector<float> want(v.begin() + 1234, v.begin() + 1234 + 350);
  expect_bitwise(gv.to_vector(), want, "view to host");
  Tensor other = Tensor::zeros({50, 7}, DType::f32, gpu());
  expect_bitwise(other.to_vector(), std::vector<float>(350, 0.f), "zeros on cuda");
  other.copy_from(gv);
  expect_bitwise(other.to_vector(), want, "copy_from device view");
  Tensor back = Tensor::zeros({50, 7});
  back.copy_from(gv);
  expect_bitwise(back.to_vector(), want, "copy_from device to host");
}

TEST_F(CudaRuntime, CopyLargerThanAStagingSlot) {
  const int64_t n = (int64_t{80} << 20) / 4;  // 80 MiB: chunked through the 64 MiB slots
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000003) * 0.5f;
  Tensor g = Tensor::from_vector(v, {n}).to(gpu());
  expect_bitwise(g.to_vector(), v, "80 MiB round trip");
}

TEST_F(CudaRuntime, PeerCopyBetweenTwoGpus) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA GPUs, " << cuda_device_count() << " visible";
  auto v = randn(1 << 20, 3);
  Tensor a = Tensor::from_vector(v, {1 << 20}).to(Device::cuda(0));
  Tensor b = a.to(Device::cuda(1));
  EXPECT_EQ(b.device(), Device::cuda(1));
  expect_bitwise(b.to(Device::cuda(0)).to_vector(), v, "cuda:0 -> cuda:1 -> cuda:0");
}

TEST_F(CudaRuntime, CachingAllocatorReusesFreedBlocks) {
  const cuda::MemoryStats s0 = cuda::memory_stats(0);
  { Tensor t = Tensor::empty({1 << 20}, DType::f32, gpu()); }  // 4 MiB, released
  const cuda::MemoryStats s1 = cuda::memory_stats(0);
  { Tensor t = Tensor::empty({1 << 20}, DType::f32, gpu()); }  // the same block again
  const cuda::MemoryStats s2 = cuda::memory_stats(0);
  EXPECT_EQ(s2.device_mallocs, s1.device_mallocs) << "a freed 4 MiB block was not reused";
  EXPECT_GT(s2.cache_hits, s1.cache_hits);
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_GE(s2.peak_allocated_bytes, s0.allocated_bytes + (size_t{4} << 20));
  EXPECT_GE(s2.reserved_bytes, s2.allocated_bytes);
  cuda::reset_peak_memory(0);
  EXPECT_EQ(cuda::peak_allocated_bytes(0), cuda::memory_stats(0).allocated_bytes);
}

TEST_F(CudaRuntime, StreamsNamesAndErrors) {
  EXPECT_NE(cuda::compute_stream(0), nullptr);
  cuda::synchronize(0);
  EXPECT_NE(cuda::device_name(0).find("sm_"), std::string::npos) << cuda::device_name(0);
  std::printf("[ info ] cuda:0 is %s\n", cuda::device_name(0).c_str());
  const int count = cuda_device_count();
  try {
    kernels_for(Device::cuda(count));
    FAIL() << "cuda:" << count << " accepted with " << count << " device(s) visible";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("visible"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::set_device(count), std::invalid_argument);
  void* pinned = cuda::alloc_pinned_host(4096);
  EXPECT_NE(pinned, nullptr);
  cuda::free_pinned_host(pinned);
}

// --- a model trained on both devices -------------------------------------------------

std::unique_ptr<Model> make_mlp() {
  auto m = std::make_unique<Model>();
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(784, 128));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("drop", std::make_unique<Dropout>(0.1f, 5));
  m->add("fc2", std::make_unique<Linear>(128, 128));
  m->add("gelu", std::make_unique<GELU>());
  m->add("norm", std::make_unique<LayerNorm>(128));
  m->add("fc3", std::make_unique<Linear>(128, 10));
  return m;
}

std::unique_ptr<Model> make_cnn() {
  auto m = std::make_unique<Model>();
  m->add("conv1", std::make_unique<Conv2d>(1, 8, 3, 1, 1));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("pool1", std::make_unique<MaxPool2d>(2));
  m->add("conv2", std::make_unique<Conv2d>(8, 16, 3, 2, 1));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc", std::make_unique<Linear>(16 * 7 * 7, 10));
  return m;
}

struct TrainResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  std::vector<uint64_t> mallocs_after_step;  // CUDA only
};

TrainResult train(std::unique_ptr<Model> model, Device device, int steps) {
  const int64_t batch = 64;
  model->reset_parameters(11);
  model->to(device);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.momentum = 0.9f;
  oc.weight_decay = 1e-4f;
  auto opt = make_optimizer(oc, model->parameters());
  SoftmaxCrossEntropy loss;
  TrainResult r;
  for (int s = 0; s < steps; ++s) {
    Tensor x = Tensor::from_vector(randn(batch * 784, 100 + s), {batch, 1, 28, 28});
    Tensor y = Tensor::empty({batch}, DType::i32);
    for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 3 + s) % 10);
    model->zero_grad();
    Tensor logits = model->forward(x.to(device));
    r.losses.push_back(loss.forward(logits, y.to(device)));
    model->backward(loss.backward(1.f / batch));
    opt->step(0.05f);
    if (device.is_cuda()) r.mallocs_after_step.push_back(cuda::memory_stats(device.index).device_mallocs);
  }
  for (Parameter* p : model->parameters()) r.params.push_back(p->value.to_vector());
  return r;
}

void compare_training(const std::string& what, std::unique_ptr<Model> (*make)()) {
  const int steps = 10;
  TrainResult c = train(make(), Device::cpu(), steps);
  TrainResult g = train(make(), Device::cuda(0), steps);
  for (int s = 0; s < steps; ++s)
    EXPECT_NEAR(g.losses[s], c.losses[s], 1e-4 * std::fabs(c.losses[s])) << what << " loss at step " << s;
  const std::unique_ptr<Model> reference = make();  // for the parameter names
  const auto& names = reference->parameters();
  ASSERT_EQ(g.params.size(), c.params.size());
  for (size_t i = 0; i < c.params.size(); ++i)
    expect_normwise(g.params[i], c.params[i], 1e-4, what + " " + names[i]->name + " after 10 steps");
  // The caching allocator: once warm, a step asks the driver for nothing.
  std::printf("[ info ] %s: cudaMalloc calls after steps 1, 2, %d: %llu, %llu, %llu\n", what.c_str(), steps,
              static_cast<unsigned long long>(g.mallocs_after_step[0]),
              static_cast<unsigned long long>(g.mallocs_after_step[1]),
              static_cast<unsigned long long>(g.mallocs_after_step.back()));
  EXPECT_EQ(g.mallocs_after_step.back(), g.mallocs_after_step[1])
      << what << ": steps 3.." << steps << " called cudaMalloc";
}

TEST_F(CudaRuntime, MlpTrainsLikeTheCpu) { compare_training("mlp", make_mlp); }

TEST_F(CudaRuntime, CnnTrainsLikeTheCpu) { compare_training("cnn", make_cnn); }

}  // namespace
}  // namespace tandem::gpu_test
