// The code of docs/api.md, compiled and run. Each region between "// [snippet: NAME]" and
// "// [end]" is quoted verbatim by docs/api.md (tests/repo/api_snippets.sh checks that
// every cpp block there is such a region, here or in examples/). It includes only
// <tandem/tandem.h>, as a user's program does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <tandem/tandem.h>

namespace {

// [snippet: leaf-module]
// y = x W^T: a layer with one parameter, on any device (it calls only kernels_for()).
class Projection final : public tandem::Module {
 public:
  Projection(int64_t in, int64_t out) : in_(in), out_(out) { weight_ = &add_parameter("weight", {out, in}); }
  std::string kind() const override { return "Projection"; }
  void reset_parameters(uint64_t seed) override { tandem::init_normal(*weight_, seed, 0.02f); }

  tandem::Tensor forward(const tandem::Tensor& x) override {
    tandem::check_tensor(kind(), "input", x, device());
    const int64_t rows = x.numel() / in_;
    tandem::Tensor y = tandem::Tensor::empty({rows, out_}, tandem::DType::f32, device());
    tandem::kernels_for(device()).gemm(y.f32(), x.f32(), weight_->value.f32(), rows, out_, in_, false, true, 1.f, 0.f);
    x_ = x;  // what backward needs
    return y;
  }

  tandem::Tensor backward(const tandem::Tensor& dy) override {
    const int64_t rows = x_.numel() / in_;
    tandem::Kernels& k = tandem::kernels_for(device());
    // dW += dy^T x: beta = 1 ADDS into the gradient, through grad_ptr(); never assign grad.
    k.gemm(tandem::grad_ptr(*weight_), dy.f32(), x_.f32(), out_, in_, rows, true, false, 1.f, 1.f);
    tandem::Tensor dx = tandem::Tensor::empty(x_.shape(), tandem::DType::f32, device());
    k.gemm(dx.f32(), dy.f32(), weight_->value.f32(), rows, in_, out_, false, false, 1.f, 0.f);
    x_ = tandem::Tensor();  // release the saved input
    return dx;
  }

 private:
  int64_t in_, out_;
  tandem::Parameter* weight_;
  tandem::Tensor x_;
};
// [end]

// [snippet: composite-module]
// y = x + f(x): a module made of sub-modules. backward_child() runs a child's backward and
// reports the child's parameters ready at once, so DDP can start reducing them.
class Residual final : public tandem::Module {
 public:
  explicit Residual(int64_t width) {
    up_ = &add_module("up", std::make_unique<tandem::Linear>(width, 4 * width));
    act_ = &add_module("act", std::make_unique<tandem::ReLU>());
    down_ = &add_module("down", std::make_unique<Projection>(4 * width, width));
  }
  std::string kind() const override { return "Residual"; }

  tandem::Tensor forward(const tandem::Tensor& x) override {
    tandem::Tensor y = down_->forward(act_->forward(up_->forward(x)));
    tandem::kernels_for(device()).axpy(y.f32(), x.f32(), x.numel(), 1.f);  // y += x
    return y;
  }

  tandem::Tensor backward(const tandem::Tensor& dy) override {
    tandem::Tensor dx = backward_child(*up_, backward_child(*act_, backward_child(*down_, dy)));
    tandem::kernels_for(device()).axpy(dx.f32(), dy.f32(), dy.numel(), 1.f);  // the skip path
    return dx;
  }

 private:
  tandem::Linear* up_;
  tandem::ReLU* act_;
  Projection* down_;
};
// [end]

// [snippet: model]
std::unique_ptr<tandem::Model> make_model(uint64_t seed) {
  auto m = std::make_unique<tandem::Model>();
  m->add("flatten", std::make_unique<tandem::Flatten>());
  m->add("fc_in", std::make_unique<tandem::Linear>(28 * 28, 64));
  m->add("block", std::make_unique<Residual>(64));  // parameters block.up.weight, block.down.weight, ...
  m->add("relu", std::make_unique<tandem::ReLU>());
  m->add("fc_out", std::make_unique<tandem::Linear>(64, 10));
  m->reset_parameters(seed);  // every value a pure function of (seed, parameter name)
  return m;
}
// [end]

// [snippet: batchnorm-model]
// BatchNorm keeps buffers (bn.running_mean, bn.running_var, bn.num_batches_tracked): saved
// in checkpoints, kept equal across replicas, never trained. ActivationCheckpoint recomputes
// the block's activations in backward instead of keeping them; names stay block.up.weight.
std::unique_ptr<tandem::Model> make_bn_model(uint64_t seed) {
  auto m = std::make_unique<tandem::Model>();
  m->add("conv", std::make_unique<tandem::Conv2d>(1, 8, 3, /*stride=*/1, /*padding=*/1, /*bias=*/false));
  m->add("bn", std::make_unique<tandem::BatchNorm>(tandem::BatchNormKind::d2, 8));
  m->add("relu", std::make_unique<tandem::ReLU>());
  m->add("pool", std::make_unique<tandem::GlobalAvgPool>());  // (N, 8, H, W) -> (N, 8)
  m->add("block", std::make_unique<tandem::ActivationCheckpoint>(std::make_unique<Residual>(8)));
  m->add("fc", std::make_unique<tandem::Linear>(8, 10));
  m->reset_parameters(seed);
  return m;
}
// [end]

// [snippet: batch-source]
// A data source of your own: any BatchSource. Here, batches built in memory; position()
// and seek() let a resumed run continue where it stopped.
class InMemoryBatches final : public tandem::BatchSource {
 public:
  explicit InMemoryBatches(std::vector<tandem::Batch> batches) : batches_(std::move(batches)) {}
  int64_t batch_size() const override { return batches_.front().size(); }
  int64_t replicas() const override { return 1; }
  int64_t steps_per_epoch() const override { return static_cast<int64_t>(batches_.size()); }
  void seek(tandem::LoaderPosition p) override { position_ = p; }
  tandem::LoaderPosition position() const override { return position_; }
  std::optional<tandem::Batch> next() override {
    if (position_.step_in_epoch >= steps_per_epoch()) return std::nullopt;
    return batches_[static_cast<size_t>(position_.step_in_epoch++)];
  }

 private:
  std::vector<tandem::Batch> batches_;
  tandem::LoaderPosition position_;
};
// [end]

// [snippet: own-loss]
// Half the squared distance between output 0 and target 0, both (N, D) f32: row i's loss
// is 0.5 * sum_j (y_ij - t_ij)^2, its gradient scale * (y - t). It returns the SUM of the
// row losses and the row count; the strategy picks the scale (1 / rows of the global
// batch). Built from kernels_for(), so it runs on any device.
class HalfSquaredError final : public tandem::Loss {
 public:
  std::string name() const override { return "half_squared_error"; }
  tandem::LossSum forward(std::span<const tandem::Tensor> outputs, std::span<const tandem::Tensor> targets) override {
    if (outputs.empty() || targets.empty()) throw std::invalid_argument(name() + ": needs an output and a target");
    const tandem::Tensor& y = outputs[0];
    const tandem::Tensor& t = targets[0];
    if (t.shape() != y.shape()) tandem::throw_shape_error(name(), "target", tandem::shape_str(y.shape()), t.shape());
    tandem::Kernels& k = tandem::kernels_for(y.device());
    diff_ = tandem::Tensor::empty(y.shape(), tandem::DType::f32, y.device());
    k.copy(diff_.f32(), y.f32(), y.numel());
    k.axpy(diff_.f32(), t.f32(), y.numel(), -1.0f);  // y - t
    tandem::Tensor squares = tandem::Tensor::empty(y.shape(), tandem::DType::f32, y.device());
    k.mul(squares.f32(), diff_.f32(), diff_.f32(), y.numel());
    k.scale(squares.f32(), y.numel(), 0.5f);
    return {k.sum_later(squares.f32(), squares.numel()), y.dim(0)};
  }
  std::span<const tandem::Tensor> backward(float scale) override {
    grad_[0] = diff_.clone();
    tandem::kernels_for(grad_[0].device()).scale(grad_[0].f32(), grad_[0].numel(), scale);
    return grad_;
  }

 private:
  tandem::Tensor diff_, grad_[1];
};
// [end]

// y = x . (1, -2, 3) + 0.5 + noise: a regression with known coefficients.
std::vector<tandem::Batch> regression_batches(int64_t batches, int64_t rows) {
  std::vector<tandem::Batch> out;
  uint64_t s = 7;
  auto uniform = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  };
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<float> x(rows * 3), y(rows);
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < 3; ++j) x[i * 3 + j] = uniform();
      y[i] = x[i * 3] - 2 * x[i * 3 + 1] + 3 * x[i * 3 + 2] + 0.5f + 0.01f * uniform();
    }
    tandem::Batch batch;
    batch.inputs = tandem::Tensor::from_vector(x, {rows, 3});
    batch.labels = tandem::Tensor::from_vector(y, {rows, 1});  // f32 targets: whatever the loss reads
    batch.indices.resize(static_cast<size_t>(rows));
    out.push_back(batch);
  }
  return out;
}

// Mean absolute error of output 0 against target 0, read on the host.
class MeanAbsoluteError final : public tandem::Metric {
 public:
  std::string name() const override { return "mae"; }
  void reset() override { sum_ = 0, n_ = 0; }
  void add(std::span<const tandem::Tensor> outputs, std::span<const tandem::Tensor> targets) override {
    const std::vector<float> y = outputs[0].to_vector(), t = targets[0].to_vector();
    for (size_t i = 0; i < y.size(); ++i) sum_ += std::fabs(static_cast<double>(y[i]) - t[i]);
    n_ += static_cast<int64_t>(y.size());
  }
  double value() const override { return n_ ? sum_ / static_cast<double>(n_) : 0; }

 private:
  double sum_ = 0;
  int64_t n_ = 0;
};

// A custom comm hook: all-reduce with average, in place, and count the bytes it moved.
// [snippet: comm-hook]
class CountingHook final : public tandem::CommHook {
 public:
  explicit CountingHook(int64_t* bytes) : bytes_(bytes) {}
  std::shared_ptr<tandem::Work> launch(tandem::ProcessGroup& group, tandem::Tensor& flat) override {
    *bytes_ += static_cast<int64_t>(flat.nbytes());
    return group.allreduce(tandem::Buffer{flat.raw(), flat.numel(), flat.dtype(), flat.device()},
                           tandem::ReduceOp::avg);
  }
  void finish(tandem::Tensor&) override {}  // the average is already in place

 private:
  int64_t* bytes_;
};

tandem::ParallelOptions with_counting_hook(tandem::ParallelOptions options, int64_t* bytes) {
  options.custom_comm_hook = [bytes](const tandem::Tensor&, bool direct) -> std::unique_ptr<tandem::CommHook> {
    if (!direct) throw std::invalid_argument("CountingHook reduces only where the group takes the bucket");
    return std::make_unique<CountingHook>(bytes);
  };
  return options;
}
// [end]

// Compiled, not run here: under ddp every rank's loop ends at its own last batch.
[[maybe_unused]] void uneven_loop(tandem::ParallelOptions options, tandem::BatchSource& my_batches) {
  // [snippet: uneven]
  options.uneven_inputs = tandem::UnevenInputs::join;  // or throw_on_early_termination
  std::unique_ptr<tandem::Strategy> strategy =
      tandem::parallelize([] { return make_model(0); }, tandem::OptimizerConfig{}, options);
  for (;;) {
    std::vector<tandem::Batch> micro;  // empty once this rank is out of data
    if (std::optional<tandem::Batch> batch = my_batches.next()) micro.push_back(std::move(*batch));
    if (strategy->forward_backward(micro).done()) break;  // every rank is out: the same step everywhere
    strategy->step(0.05f);  // a rank out of data steps too: the replicas stay identical
  }
  // [end]
}

// Compiled, not run here: they need a launcher's environment (examples/ run them).
[[maybe_unused]] void groups() {
  // [snippet: group-from-environment]
  // Under tandemrun or mpirun: rank, world size and the store come from the environment.
  std::shared_ptr<tandem::ProcessGroup> group = tandem::init_process_group();
  // [end]
  // [snippet: group-explicit]
  tandem::LaunchEnv env;
  env.rank = 1;
  env.world_size = 4;
  env.master_addr = "10.0.0.1";  // where rank 0 hosts the store
  env.master_port = 29500;
  tandem::InitOptions options;
  options.backend = tandem::Backend::gloo;
  options.timeout = std::chrono::seconds(60);
  std::shared_ptr<tandem::ProcessGroup> explicit_group = tandem::init_process_group(options, env);
  // [end]
}

}  // namespace

TEST(Api, CustomModulesGradientsMatchFiniteDifferences) {
  tandem::set_cpu_threads(1);
  std::unique_ptr<tandem::Model> model = make_model(3);
  tandem::Dataset data = tandem::make_synthetic(8, 1, true);
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  tandem::Batch b = tandem::make_batch(data, all);
  tandem::SoftmaxCrossEntropy loss;
  auto mean_loss = [&] { return loss.forward(model->forward(b.inputs), b.labels); };
  model->zero_grad();
  mean_loss();
  model->backward(loss.dlogits(1.f / 8));
  for (const char* name : {"block.down.weight", "block.up.weight", "fc_in.weight"}) {
    tandem::Parameter* p = model->find(name);
    ASSERT_NE(p, nullptr) << name;
    const std::vector<float> g = p->grad.to_vector();
    for (int64_t i : {int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
      float* v = p->value.f32();
      const float saved = v[i];
      v[i] = saved + 1e-2f;
      const double up = mean_loss();
      v[i] = saved - 1e-2f;
      const double down = mean_loss();
      v[i] = saved;
      EXPECT_NEAR(g[i], (up - down) / 2e-2, 2e-3 + 2e-2 * std::fabs(g[i])) << name << "[" << i << "]";
    }
  }
}

TEST(Api, TheLoopTrainsInEveryProcessModeAndResumes) {
  tandem::set_cpu_threads(1);
  const std::string dir = (std::filesystem::temp_directory_path() / ("tandem-api-" + std::to_string(getpid()))).string();
  auto train = std::make_shared<const tandem::Dataset>(tandem::make_synthetic(2048, 7, true));
  auto test = std::make_shared<const tandem::Dataset>(tandem::make_synthetic(512, 7, false));
  const uint64_t seed = 0;
  const int64_t batch_size = 32;
  std::vector<std::string> checksums;
  for (const char* mode_name : {"single", "dp"}) {
    // [snippet: parallelize]
    tandem::OptimizerConfig optimizer;
    optimizer.kind = tandem::OptimizerKind::sgd;
    optimizer.momentum = 0.9f;
    tandem::ParallelOptions options;
    options.mode = tandem::parse_mode(mode_name);  // "single", "dp" or "ddp"
    options.devices = options.mode == tandem::Mode::dp ? 2 : 1;
    std::unique_ptr<tandem::Strategy> strategy =
        tandem::parallelize([&] { return make_model(seed); }, optimizer, options);
    // [end]
    // [snippet: loop]
    std::unique_ptr<tandem::BatchSource> batches = tandem::training_batches(train, batch_size, *strategy, seed);
    const int64_t steps = batches->steps_per_epoch();
    tandem::LrSchedule schedule(/*base_lr=*/0.05f, /*warmup_steps=*/steps / 10, /*total_steps=*/steps);
    int64_t step = 0;
    while (std::optional<tandem::Batch> batch = batches->next()) {
      tandem::StepOutput out = strategy->forward_backward(*batch);  // forward, loss, backward
      strategy->step(schedule.at(step++));                          // the optimizer update
      if (step % 20 == 0 && strategy->rank() == 0) std::printf("step %lld loss %.4f\n", (long long)step, out.loss());
    }
    std::unique_ptr<tandem::BatchSource> test_batches = tandem::evaluation_batches(test);
    tandem::EvalResult result = strategy->evaluate(*test_batches);
    // [end]
    EXPECT_GT(result.metric("accuracy").value_or(0), 0.9) << mode_name;
    checksums.push_back(tandem::parameter_checksum(strategy->model()));

    // [snippet: checkpoint]
    tandem::CheckpointMeta meta;
    meta.step = step;
    meta.seed = seed;
    meta.batch_size = batch_size;
    meta.replicas = strategy->replicas();
    if (strategy->rank() == 0) tandem::save_checkpoint(dir, strategy->model(), strategy->optimizer(), meta);
    // ... later, in a new process with the same model:
    const std::string latest = tandem::resolve_resume("auto", dir);  // "" when there is none
    if (!latest.empty()) {
      tandem::CheckpointMeta loaded = tandem::load_checkpoint(latest, strategy->model(), &strategy->optimizer());
      step = loaded.step;
    }
    // [end]
    EXPECT_EQ(step, steps);
    std::filesystem::remove_all(dir);
  }
  EXPECT_EQ(checksums.size(), 2u);

  // [snippet: trace-summary]
  tandem::Tracer tracer(/*rank=*/0);
  {
    tandem::Tracer::Scope span(&tracer, "my phase");  // a span from here to the end of the block
  }
  tracer.write(dir + "-trace.json");  // chrome://tracing or ui.perfetto.dev
  tandem::RunSummary summary;
  summary.mode = "single";
  summary.model = "custom";
  summary.steps = 64;
  tandem::write_summary_json(summary, dir + "-summary.json");
  // [end]
  EXPECT_TRUE(std::filesystem::exists(dir + "-trace.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "-summary.json"));
  std::filesystem::remove(dir + "-trace.json");
  std::filesystem::remove(dir + "-summary.json");

  // A data source of your own feeds the same loop.
  std::vector<tandem::Batch> mine;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<int64_t> idx = {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3};
    mine.push_back(tandem::make_batch(*train, idx));
  }
  InMemoryBatches source(mine);
  auto single = tandem::parallelize([&] { return make_model(seed); }, tandem::OptimizerConfig{}, {});
  int64_t seen = 0;
  while (std::optional<tandem::Batch> batch = source.next()) {
    single->forward_backward(*batch);
    single->step(0.01f);
    ++seen;
  }
  EXPECT_EQ(seen, 4);
  int64_t hook_bytes = 0;
  tandem::ParallelOptions ddp_options = with_counting_hook(tandem::ParallelOptions{}, &hook_bytes);
  EXPECT_THROW(tandem::parallelize([&] { return make_model(seed); }, tandem::OptimizerConfig{}, ddp_options),
               std::invalid_argument);  // a comm hook needs Mode::ddp
}

TEST(Api, YourLossAndMetricsTrainARegressionInEveryProcessMode) {
  tandem::set_cpu_threads(1);
  for (tandem::Mode mode : {tandem::Mode::single, tandem::Mode::dp}) {
    // [snippet: loss-options]
    tandem::ParallelOptions options;
    options.mode = mode;
    options.devices = mode == tandem::Mode::dp ? 2 : 1;
    options.loss = [](const tandem::LossContext&) { return std::make_unique<HalfSquaredError>(); };
    options.metrics = [] {
      tandem::Metrics metrics;
      metrics.push_back(std::make_unique<MeanAbsoluteError>());
      return metrics;
    };
    auto make_linear = [] {
      auto m = std::make_unique<tandem::Model>();
      m->add("fc", std::make_unique<tandem::Linear>(3, 1));
      m->reset_parameters(0);
      return m;
    };
    std::unique_ptr<tandem::Strategy> strategy = tandem::parallelize(make_linear, tandem::OptimizerConfig{}, options);
    // [end]
    InMemoryBatches batches(regression_batches(64, 32));
    for (int epoch = 0; epoch < 3; ++epoch) {
      batches.set_epoch(epoch);
      while (std::optional<tandem::Batch> batch = batches.next()) {
        // [snippet: no-sync]
        {
          auto scope = strategy->no_sync();  // gradients add up locally; nothing is communicated
          strategy->forward_backward(*batch);
        }
        strategy->forward_backward(*batch);  // adds its own, then reduces the sum once (DDP)
        strategy->step(0.02f);
        // [end]
      }
    }
    InMemoryBatches held_out(regression_batches(4, 32));
    tandem::EvalResult r = strategy->evaluate(held_out);
    EXPECT_LT(*r.metric("mae"), 0.02) << tandem::mode_str(mode);
    const std::vector<float> w = strategy->model().find("fc.weight")->value.to_vector();
    const float b = strategy->model().find("fc.bias")->value.to_vector()[0];
    EXPECT_NEAR(w[0], 1.0f, 0.01f);
    EXPECT_NEAR(w[1], -2.0f, 0.01f);
    EXPECT_NEAR(w[2], 3.0f, 0.01f);
    EXPECT_NEAR(b, 0.5f, 0.01f);
  }
}

TEST(Api, FineTuneLoadsWeightsByNameAndFreezesTheBody) {
  tandem::set_cpu_threads(1);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tandem-api-ft-" + std::to_string(getpid()))).string();
  {
    auto pretrained = make_model(1);
    tandem::OptimizerConfig sgd;
    auto opt = tandem::make_optimizer(sgd, pretrained->parameters());
    tandem::CheckpointMeta meta;
    tandem::save_checkpoint(dir, *pretrained, *opt, meta);
  }
  const std::string pretrained_dir = dir;
  // [snippet: fine-tune]
  // The factory loads the pretrained weights by name (all but the new head, which keeps its
  // fresh initialisation) and freezes the body: the strategy then buckets, reduces and steps
  // only fc_out, and backward stops at it.
  auto fine_tune = [&] {
    std::unique_ptr<tandem::Model> m = make_model(/*seed=*/2);
    tandem::LoadWeightsResult loaded = tandem::load_weights(pretrained_dir, *m, /*skip=*/{"fc_out.*"});
    tandem::freeze_parameters(*m, {"fc_in.*", "block.*"});  // names or globs; a typo throws, naming it
    (void)loaded;  // loaded.loaded, .skipped: the names, for a log line
    return m;
  };
  std::unique_ptr<tandem::Strategy> strategy = tandem::parallelize(fine_tune, tandem::OptimizerConfig{}, {});
  // [end]
  auto pretrained = make_model(1);
  tandem::load_checkpoint(tandem::resolve_resume("auto", dir), *pretrained, nullptr);
  auto train = std::make_shared<const tandem::Dataset>(tandem::make_synthetic(256, 7, true));
  std::unique_ptr<tandem::BatchSource> batches = tandem::training_batches(train, 32, *strategy, 0);
  while (std::optional<tandem::Batch> batch = batches->next()) {
    strategy->forward_backward(*batch);
    strategy->step(0.05f);
  }
  for (tandem::Parameter* p : strategy->model().parameters()) {
    const bool head = p->name.rfind("fc_out.", 0) == 0;
    EXPECT_EQ(p->requires_grad, head) << p->name;
    const std::vector<float> now = p->value.to_vector(), then = pretrained->find(p->name)->value.to_vector();
    EXPECT_EQ(now == then, !head) << p->name << (head ? " did not train" : " moved while frozen");
  }
  EXPECT_EQ(strategy->optimizer().state().size(), 2u);  // fc_out.weight and .bias momentum only
  // A model whose tensors do not match is refused, naming them.
  auto other = std::make_unique<tandem::Model>();
  other->add("fc_in", std::make_unique<tandem::Linear>(28 * 28, 32));
  EXPECT_THROW(tandem::load_weights(pretrained_dir, *other), tandem::WeightsMismatch);
  std::filesystem::remove_all(dir);
}

TEST(Api, SyncBatchNormInDataParallelEqualsOneProcessOnTheWholeBatch) {
  tandem::set_cpu_threads(1);
  auto train = std::make_shared<const tandem::Dataset>(tandem::make_synthetic(256, 7, true));
  tandem::OptimizerConfig optimizer;
  optimizer.momentum = 0.9f;
  tandem::ParallelOptions single_options;
  auto single = tandem::parallelize([] { return make_bn_model(0); }, optimizer, single_options);
  // [snippet: sync-bn]
  tandem::ParallelOptions options;
  options.mode = tandem::Mode::dp;
  options.devices = 2;
  options.sync_batchnorm = true;  // BatchNorm statistics over the global batch (in DDP: over every rank)
  auto strategy = tandem::parallelize([] { return make_bn_model(0); }, optimizer, options);
  // [end]
  auto a = tandem::training_batches(train, 32, *single, 0);
  auto b = tandem::training_batches(train, 16, *strategy, 0);
  for (int step = 0; step < 4; ++step) {
    const double la = single->forward_backward(*a->next()).loss(), lb = strategy->forward_backward(*b->next()).loss();
    EXPECT_NEAR(la, lb, 1e-5 * std::fabs(la)) << "step " << step;
    single->step(0.05f);
    strategy->step(0.05f);
  }
  const auto ma = single->model().find_buffer("bn.running_mean")->value.to_vector();
  const auto mb = strategy->model().find_buffer("bn.running_mean")->value.to_vector();
  for (size_t i = 0; i < ma.size(); ++i) EXPECT_NEAR(ma[i], mb[i], 1e-5 * (std::fabs(ma[i]) + 1e-3)) << i;
}
