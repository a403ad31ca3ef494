// The CUDA device as the runtime sees it: Tensor::to round trips (every dtype, views,
// empty tensors, copies larger than a staging slot, peer copies), the caching allocator
// (no cudaMalloc once a training loop is warm), device errors, a model trained for 10
// steps on CUDA and on the CPU from the same start (parameters within 1e-4 x
// max|parameter|: ten steps of GEMM-rounding differences, each ~1e-6, well inside it),
// the trainer's step (strategies, pending losses and phase times, evaluation) on CUDA,
// and checkpoints written from CUDA resumed bit for bit on CUDA, on the CPU and back.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>

#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/single.h"
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

TEST_F(CudaRuntime, EmptyTensorsOnTheDevice) {
  Tensor e = Tensor::empty({0, 7}, DType::f32, gpu());
  EXPECT_EQ(e.device(), gpu());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector().empty());
  Tensor z = Tensor::zeros({0}, DType::bf16, gpu());
  EXPECT_TRUE(z.to(Device::cpu()).to_vector().empty());
  Tensor c = e.clone();
  c.copy_from(Tensor::empty({0, 7}));  // host to device, nothing to move
  EXPECT_EQ(e.view(0, {0}).numel(), 0);
  EXPECT_EQ(gpu_k().sum(e.f32(), 0), 0.0);
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
    model->backward(loss.dlogits(1.f / batch));
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

// --- the trainer's step: strategies, pending values, evaluation, checkpoints -----------

std::unique_ptr<Model> seeded(std::unique_ptr<Model> (*make)()) {
  auto m = make();
  m->reset_parameters(11);
  return m;
}

// Step `step`'s `accum` micro-batches of 32 samples, as the trainer's loader cuts them.
std::vector<Batch> micro_batches(const Dataset& data, int step, int accum) {
  std::vector<Batch> out;
  for (int m = 0; m < accum; ++m) {
    std::vector<int64_t> idx(32);
    for (int64_t i = 0; i < 32; ++i) idx[i] = ((step * accum + m) * 32 + i) % data.size;
    out.push_back(make_batch(data, idx));
  }
  return out;
}

// One optimizer step as train/trainer.cpp drives it: queue everything, then read.
double train_step(Strategy& s, const Dataset& data, int step, int accum, PhaseTimes* times = nullptr) {
  PhaseTimes phases;
  StepOutput out = s.forward_backward(micro_batches(data, step, accum), phases);
  s.step(0.01f, phases);
  phases.resolve();
  if (times) *times = phases;
  return out.loss();
}

std::vector<std::vector<uint8_t>> param_bytes(Model& m) {
  std::vector<std::vector<uint8_t>> out;
  for (Parameter* p : m.parameters()) out.push_back(raw_bytes(p->value));
  return out;
}

std::vector<std::vector<uint8_t>> state_bytes(const Optimizer& o) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, t] : o.state()) out.push_back(raw_bytes(t));
  return out;
}

void expect_same_bytes(const std::vector<std::vector<uint8_t>>& got, const std::vector<std::vector<uint8_t>>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) expect_equal(got[i], want[i], what + ", tensor #" + std::to_string(i));
}

TEST_F(CudaRuntime, SingleStrategyStepsAndEvaluatesLikeTheCpu) {
  const Dataset train = make_synthetic(512, 3, true), test = make_synthetic(300, 3, false);
  OptimizerConfig oc;  // SGD: AdamW's normalised update would amplify sign flips of ~0 gradients
  oc.momentum = 0.9f;
  SingleStrategy on_cpu(seeded(make_mlp), oc, Device::cpu());
  SingleStrategy on_gpu(seeded(make_mlp), oc, gpu());
  std::vector<uint64_t> mallocs, pinned;
  for (int s = 0; s < 6; ++s) {
    PhaseTimes t;
    const double lc = train_step(on_cpu, train, s, 2), lg = train_step(on_gpu, train, s, 2, &t);
    EXPECT_NEAR(lg, lc, 1e-4 * std::fabs(lc)) << "loss at step " << s;
    EXPECT_GT(t.forward_ms, 0.0) << "step " << s;
    EXPECT_GT(t.backward_ms, 0.0) << "step " << s;
    EXPECT_GE(t.optimizer_ms, 0.0) << "step " << s;
    EXPECT_TRUE(t.pending.empty());
    const cuda::MemoryStats m = cuda::memory_stats(0);
    mallocs.push_back(m.device_mallocs);
    pinned.push_back(m.pinned_host_allocs);
  }
  EXPECT_EQ(mallocs.back(), mallocs[1]) << "steps 3..6 called cudaMalloc";
  EXPECT_EQ(pinned.back(), pinned[1]) << "steps 3..6 called cudaHostAlloc for staging";
  const auto& names = on_cpu.model().parameters();
  for (size_t i = 0; i < names.size(); ++i)
    expect_normwise(on_gpu.model().parameters()[i]->value.to_vector(), names[i]->value.to_vector(), 1e-4,
                    "single " + names[i]->name + " after 6 steps");

  SamplerOptions eval_so;
  eval_so.shuffle = false;
  eval_so.pad = false;
  auto test_set = std::make_shared<const Dataset>(test);
  DataLoader loader_c(test_set, DistributedSampler(test.size, eval_so), 128, false);
  DataLoader loader_g(test_set, DistributedSampler(test.size, eval_so), 128, false);
  const EvalResult ec = on_cpu.evaluate(loader_c), eg = on_gpu.evaluate(loader_g);
  EXPECT_EQ(eg.samples, test.size);  // the short last batch (44) included
  EXPECT_NEAR(eg.loss, ec.loss, 1e-4 * std::fabs(ec.loss));
  EXPECT_NEAR(*eg.metric("accuracy"), *ec.metric("accuracy"), 1.5 / static_cast<double>(test.size)) << "more than one argmax flipped";
}

TEST_F(CudaRuntime, DataParallelOnCudaMatchesSingle) {
  // Two GPUs when there are, else one replica (the same algorithm, bit for bit single's).
  const int n = std::min(2, cuda_device_count());
  const Dataset train = make_synthetic(512, 4, true);
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  SingleStrategy single(seeded(make_cnn), oc, gpu());
  std::vector<std::unique_ptr<Model>> replicas;
  std::vector<Device> devices;
  for (int d = 0; d < n; ++d) {
    replicas.push_back(seeded(make_cnn));
    devices.push_back(Device::cuda(d));
  }
  // Single takes the global batch; DP cuts the same batch across its replicas.
  DataParallelStrategy dp(std::move(replicas), oc, devices);
  for (int s = 0; s < 3; ++s) {
    const double ls = train_step(single, train, s, 1), ld = train_step(dp, train, s, 1);
    EXPECT_NEAR(ld, ls, 1e-5 * std::fabs(ls)) << "dp x" << n << " loss at step " << s;
  }
  const auto& want = single.model().parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    const auto got = dp.model().parameters()[i]->value.to_vector(), w = want[i]->value.to_vector();
    if (n == 1) expect_bitwise(got, w, "dp x1 " + want[i]->name);
    else expect_normwise(got, w, 1e-4, "dp x2 " + want[i]->name);
  }
}

struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("tandem_gpu_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(next_id()));
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int next_id() {
    static std::atomic<int> n{0};
    return n++;
  }
};

CheckpointMeta meta_at(int64_t step, const Model& model) {
  CheckpointMeta m;
  m.step = step;
  m.step_in_epoch = step;
  m.seed = 11;
  m.dataset = "synthetic";
  m.batch_size = 32;
  m.model_name = "test-mlp";
  m.input_shape = {1, 28, 28};
  m.classes = 10;
  for (const auto& [name, value] : model.counters()) m.extra["counter." + name] = std::to_string(value);
  return m;
}

// Loads `dir` into a fresh strategy on `device`, as tandem-train --resume does.
std::unique_ptr<SingleStrategy> resumed(const std::string& dir, const OptimizerConfig& oc, Device device) {
  auto s = std::make_unique<SingleStrategy>(seeded(make_mlp), oc, device);
  CheckpointMeta m = load_checkpoint(dir, s->model(), &s->optimizer());
  std::map<std::string, uint64_t> counters;
  for (const auto& [key, value] : m.extra)
    if (key.rfind("counter.", 0) == 0) counters[key.substr(8)] = std::stoull(value);
  s->set_counters(counters);
  return s;
}

TEST_F(CudaRuntime, CheckpointFromCudaResumesBitForBitOnAnyDevice) {
  const Dataset train = make_synthetic(512, 5, true);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.weight_decay = 0.01f;
  TempDir root;
  SingleStrategy a(seeded(make_mlp), oc, gpu());
  for (int s = 0; s < 3; ++s) train_step(a, train, s, 1);
  const std::string dir = save_checkpoint((root.path / "cuda").string(), a.model(), a.optimizer(), meta_at(3, a.model()));
  const auto saved_params = param_bytes(a.model()), saved_state = state_bytes(a.optimizer());
  for (int s = 3; s < 5; ++s) train_step(a, train, s, 1);

  // Back onto the GPU: the saved bytes, then the same two steps to the same bits (Dropout's
  // counter restored, CUDA's kernels deterministic).
  auto b = resumed(dir, oc, gpu());
  EXPECT_EQ(b->optimizer().steps_taken(), 3);
  expect_same_bytes(param_bytes(b->model()), saved_params, "parameters after loading onto cuda:0");
  expect_same_bytes(state_bytes(b->optimizer()), saved_state, "optimizer state after loading onto cuda:0");
  for (int s = 3; s < 5; ++s) train_step(*b, train, s, 1);
  expect_same_bytes(param_bytes(b->model()), param_bytes(a.model()), "resumed run against the uninterrupted one");
  EXPECT_EQ(parameter_checksum(b->model()), parameter_checksum(a.model()));

  // Onto the CPU, and onto another GPU than the writer's.
  auto c = resumed(dir, oc, Device::cpu());
  expect_same_bytes(param_bytes(c->model()), saved_params, "parameters after loading onto the cpu");
  expect_same_bytes(state_bytes(c->optimizer()), saved_state, "optimizer state after loading onto the cpu");
  if (cuda_device_count() >= 2) {
    auto d = resumed(dir, oc, Device::cuda(1));
    expect_same_bytes(param_bytes(d->model()), saved_params, "parameters after loading onto cuda:1");
    expect_same_bytes(state_bytes(d->optimizer()), saved_state, "optimizer state after loading onto cuda:1");
  }

  // And a CPU checkpoint onto the GPU.
  const std::string from_cpu = save_checkpoint((root.path / "cpu").string(), c->model(), c->optimizer(), meta_at(3, c->model()));
  auto e = resumed(from_cpu, oc, gpu());
  expect_same_bytes(param_bytes(e->model()), saved_params, "cpu checkpoint onto cuda:0");
  expect_same_bytes(state_bytes(e->optimizer()), saved_state, "cpu checkpoint's optimizer state onto cuda:0");
}

}  // namespace
}  // namespace tandem::gpu_test
