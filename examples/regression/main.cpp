// regression: a linear model fitted with mean squared error, by a loop of your own, in any
// mode, against the installed package alone. The data are synthetic with known coefficients,
//   y = x W* + b* + noise,  x (N, 8), y (N, 2), noise N(0, 0.003^2),
// so the program can say how close it came: it prints every fitted coefficient's distance
// from the true one. The targets are f32 tensors (not class indices), the loss is
// MeanSquaredError and the metric MeanSquaredErrorMetric (docs/api.md, section 9), and the
// data source is a BatchSource of its own that shards each global batch across replicas.
#include <tandem/tandem.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

using namespace tandem;

constexpr int64_t kFeatures = 8, kOutputs = 2;

// The true coefficients: W* (outputs, features) as Linear stores its weight, and b*.
float true_weight(int64_t o, int64_t f) { return static_cast<float>((o + 1) * (f % 2 ? -1 : 1)) * 0.25f * static_cast<float>(f + 1); }
float true_bias(int64_t o) { return o == 0 ? 0.5f : -1.0f; }

struct Samples {
  std::vector<float> x, y;  // (N, 8), (N, 2)
  int64_t size = 0;
};

Samples make_samples(int64_t n, uint64_t seed, float noise) {
  Samples s;
  s.size = n;
  s.x.resize(n * kFeatures), s.y.resize(n * kOutputs);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::normal_distribution<float> e(0.f, noise);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t f = 0; f < kFeatures; ++f) s.x[i * kFeatures + f] = u(rng);
    for (int64_t o = 0; o < kOutputs; ++o) {
      float v = true_bias(o);
      for (int64_t f = 0; f < kFeatures; ++f) v += true_weight(o, f) * s.x[i * kFeatures + f];
      s.y[i * kOutputs + o] = v + e(rng);
    }
  }
  return s;
}

// One replica's share of each global batch: epoch e's permutation (seeded by e) cut into
// global batches of batch_size x replicas; replica r takes its contiguous slice of each. The
// batch at a position is a pure function of (seed, position, replica), so seek() resumes.
class RegressionBatches final : public BatchSource {
 public:
  RegressionBatches(std::shared_ptr<const Samples> data, int64_t batch_size, int64_t replicas, int64_t rank)
      : data_(std::move(data)), batch_(batch_size), replicas_(replicas), rank_(rank) {}
  int64_t batch_size() const override { return batch_; }
  int64_t replicas() const override { return replicas_; }
  int64_t steps_per_epoch() const override { return data_->size / (batch_ * replicas_); }
  void seek(LoaderPosition p) override {
    if (p.step_in_epoch < 0 || p.step_in_epoch > steps_per_epoch()) throw std::out_of_range("seek: step out of range");
    if (p.epoch != pos_.epoch || order_.empty()) {
      order_.resize(static_cast<size_t>(data_->size));
      std::iota(order_.begin(), order_.end(), 0);
      std::shuffle(order_.begin(), order_.end(), std::mt19937_64(1000 + p.epoch));
    }
    pos_ = p;
  }
  LoaderPosition position() const override { return pos_; }
  std::optional<Batch> next() override {
    if (order_.empty()) seek(pos_);
    if (pos_.step_in_epoch >= steps_per_epoch()) return std::nullopt;
    const int64_t first = (pos_.step_in_epoch * replicas_ + rank_) * batch_;
    std::vector<float> x(batch_ * kFeatures), y(batch_ * kOutputs);
    Batch b;
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t src = order_[static_cast<size_t>(first + i)];
      std::copy_n(&data_->x[src * kFeatures], kFeatures, &x[i * kFeatures]);
      std::copy_n(&data_->y[src * kOutputs], kOutputs, &y[i * kOutputs]);
      b.indices.push_back(src);
    }
    b.inputs = Tensor::from_vector(x, {batch_, kFeatures});
    b.labels = Tensor::from_vector(y, {batch_, kOutputs});  // f32 targets, one row per sample
    b.epoch = pos_.epoch, b.step_in_epoch = pos_.step_in_epoch++;
    return b;
  }

 private:
  std::shared_ptr<const Samples> data_;
  int64_t batch_, replicas_, rank_;
  std::vector<int64_t> order_;
  LoaderPosition pos_;
};

struct Args {
  Mode mode = Mode::single;
  int64_t epochs = 20, global_batch = 192, devices = 1, samples = 4032;  // 192: 1, 2, 3, 4 or 6 replicas
  double lr = 0.05;
};
constexpr const char* kUsage = "usage: regression [--mode single|dp|ddp] [--epochs N] [--global-batch N] [--lr X] "
                               "[--devices N] [--samples N]\n";

Args parse_args(int argc, char** argv) {  // throws std::invalid_argument naming the flag
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": unknown flag, or its value is missing");
    auto number = [&](double min) {
      char* end = nullptr;
      const double n = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(n >= min))
        throw std::invalid_argument(flag + " must be a number >= " + std::to_string(min) + ", got '" + v + "'");
      return n;
    };
    if (flag == "--mode") a.mode = parse_mode(v);
    else if (flag == "--lr") a.lr = number(0);
    else if (int64_t* n = flag == "--epochs" ? &a.epochs : flag == "--global-batch" ? &a.global_batch
                        : flag == "--devices" ? &a.devices : flag == "--samples" ? &a.samples : nullptr)
      *n = static_cast<int64_t>(number(1));
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (a.devices > 1 && a.mode != Mode::dp) throw std::invalid_argument("--devices needs --mode dp");
  return a;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return std::printf("%s", kUsage), 0;
  Args a;
  try { a = parse_args(argc, argv); } catch (const std::exception& e) {
    std::fprintf(stderr, "regression: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    ParallelOptions po;
    po.mode = a.mode, po.devices = static_cast<int>(a.devices);
    po.loss = [](const LossContext&) { return std::make_unique<MeanSquaredError>(); };
    po.metrics = [] {
      Metrics m;
      m.push_back(std::make_unique<MeanSquaredErrorMetric>());
      return m;
    };
    auto make_model = [] {
      auto m = std::make_unique<Model>();
      m->add("fc", std::make_unique<Linear>(kFeatures, kOutputs));
      m->reset_parameters(/*seed=*/0);
      return m;
    };
    OptimizerConfig sgd;  // SGD, momentum 0.9
    std::unique_ptr<Strategy> s = parallelize(make_model, sgd, po);
    const bool lead = s->rank() == 0;
    auto train = std::make_shared<const Samples>(make_samples(a.samples, 1, 0.003f));
    auto test = std::make_shared<const Samples>(make_samples(1024, 2, 0.0f));
    // The same global batches in every mode: ddp ranks take their share of each, single and
    // dp the whole of it (dp cuts it across its replicas itself).
    const bool ddp = a.mode == Mode::ddp;
    if (a.global_batch % s->replicas() != 0)
      throw std::invalid_argument("--global-batch " + std::to_string(a.global_batch) + " does not split over " +
                                  std::to_string(s->replicas()) + " replicas");
    const int64_t replicas = ddp ? s->replicas() : 1, per_process = ddp ? a.global_batch / replicas : a.global_batch;
    RegressionBatches batches(train, per_process, replicas, s->rank());
    const int64_t total = a.epochs * batches.steps_per_epoch();
    LrSchedule schedule(static_cast<float>(a.lr), total / 20, total);
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
      batches.set_epoch(epoch);
      StepOutput out;
      while (std::optional<Batch> batch = batches.next()) {
        out = s->forward_backward(*batch);  // gradients of the global batch's mean squared error
        s->step(schedule.at(step++));
      }
      const double loss = s->global_loss(out.loss());  // a collective under ddp: every rank calls it
      if (lead && (epoch + 1) % 5 == 0) std::printf("epoch %lld/%lld mse %.6f\n", (long long)epoch + 1, (long long)a.epochs, loss);
    }
    RegressionBatches held_out(test, 256, 1, 0);
    const EvalResult r = s->evaluate(held_out);
    double worst = 0;
    const std::vector<float> w = s->model().find("fc.weight")->value.to_vector();
    const std::vector<float> b = s->model().find("fc.bias")->value.to_vector();
    for (int64_t o = 0; o < kOutputs; ++o) {
      worst = std::max(worst, std::fabs(static_cast<double>(b[o]) - true_bias(o)));
      for (int64_t f = 0; f < kFeatures; ++f)
        worst = std::max(worst, std::fabs(static_cast<double>(w[o * kFeatures + f]) - true_weight(o, f)));
    }
    if (lead) {
      std::printf("fitted bias %.4f %.4f (true %.4f %.4f)\ncoefficients", b[0], b[1], true_bias(0), true_bias(1));
      for (float v : w) std::printf(" %.9g", v);  // all of them, for comparing modes
      for (float v : b) std::printf(" %.9g", v);
      std::printf("\nparam_checksum %s\n", parameter_checksum(s->model()).c_str());
      std::printf("test_mse %.3g\nregression: mode %s, world %d, max coefficient error %.3g\n", *r.metric("mse"),
                  s->mode(), ddp ? s->replicas() : 1, worst);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "regression: %s\n", e.what());
    return 1;
  }
}
