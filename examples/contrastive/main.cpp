// contrastive: a two-view encoder trained with InfoNCE over the GLOBAL batch, in any mode,
// against the installed package alone. Each sample is a hidden code z (8 numbers) seen
// twice through a fixed random projection with independent noise; the encoder must map
// both views of a sample close together and apart from every other sample's. Under ddp
// the loss gathers every rank's embeddings (InfoNce with the strategy's group), so each
// rank's rows are contrasted with the whole global batch, and the gradient flows back
// through the gather: DDP(R) trains the same model as one process on the whole batch.
//   model   (N, 2, 16) -> encoder 16-64-32 on both views at once -> outputs q, k (N, 32)
//   loss    InfoNce (CLIP's symmetric form, temperature 0.1), LossContext's group
//   metric  top-1 retrieval: the fraction of q whose nearest k in the batch is its own view
#include <tandem/tandem.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

using namespace tandem;

constexpr int64_t kCode = 8, kView = 16, kHidden = 64, kEmbed = 32;

// Both views go through one encoder as one (2N, 16) batch; the (N, 2, E) result is
// regrouped into q = every sample's first view and k = its second (swap_leading: (N, 2, E)
// -> (2, N, E)). backward_outputs undoes that regrouping and runs the encoder's backward.
class TwoViewEncoder final : public Model {
 public:
  TwoViewEncoder() {
    add("fc1", std::make_unique<Linear>(kView, kHidden));
    add("relu", std::make_unique<ReLU>());
    add("fc2", std::make_unique<Linear>(kHidden, kEmbed));
  }
  // x (N, 2, 16) -> {q (N, E), k (N, E)}
  std::vector<Tensor> forward_outputs(const Tensor& x) override {
    if (x.ndim() != 3 || x.dim(1) != 2 || x.dim(2) != kView) throw_shape_error("TwoViewEncoder", "input", "(N, 2, 16)", x.shape());
    n_ = x.dim(0);
    Tensor h = forward(x.reshape({2 * n_, kView}));  // (2N, E): rows 2i, 2i+1 are sample i's views
    Tensor views = reuse_buffer(views_cache_, {2, n_, kEmbed}, device());  // (2, N, E)
    kernels_for(device()).swap_leading(views.f32(), h.f32(), n_, 2, kEmbed);
    return {views.view(0, {n_, kEmbed}), views.view(n_ * kEmbed, {n_, kEmbed})};
  }
  Tensor backward_outputs(std::span<const Tensor> douts) override {
    if (douts.size() != 2 || !douts[0].defined() || !douts[1].defined())
      throw std::invalid_argument("TwoViewEncoder: backward needs the gradients of q and k");
    Kernels& k = kernels_for(device());
    Tensor both = reuse_buffer(both_cache_, {2, n_, kEmbed}, device());  // (2, N, E)
    k.copy(both.f32(), douts[0].f32(), n_ * kEmbed);
    k.copy(both.f32() + n_ * kEmbed, douts[1].f32(), n_ * kEmbed);
    Tensor dh = reuse_buffer(dh_cache_, {2 * n_, kEmbed}, device());  // back to (N, 2, E) order
    k.swap_leading(dh.f32(), both.f32(), 2, n_, kEmbed);
    return backward(dh);
  }

 private:
  int64_t n_ = 0;
  Tensor views_cache_, both_cache_, dh_cache_;
};

// Samples: code z ~ N(0, 1)^8; view = P z + 0.1 * noise, P a fixed (16, 8) projection.
struct Samples {
  std::vector<float> views;  // (N, 2, 16)
  int64_t size = 0;
};

Samples make_samples(int64_t n, uint64_t seed) {
  std::mt19937_64 fixed(7);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> p(kView * kCode);
  for (float& v : p) v = g(fixed) / std::sqrt(static_cast<float>(kCode));
  std::mt19937_64 rng(seed);
  Samples s;
  s.size = n;
  s.views.resize(n * 2 * kView);
  std::vector<float> z(kCode);
  for (int64_t i = 0; i < n; ++i) {
    for (float& v : z) v = g(rng);
    for (int view = 0; view < 2; ++view)
      for (int64_t r = 0; r < kView; ++r) {
        float v = 0.1f * g(rng);
        for (int64_t c = 0; c < kCode; ++c) v += p[r * kCode + c] * z[c];
        s.views[(i * 2 + view) * kView + r] = v;
      }
  }
  return s;
}

// Replica `rank` of `replicas` takes the contiguous slice of each global batch (so the
// gathered global batch is in sample order); epoch e's order is a permutation seeded by e.
class ViewBatches final : public BatchSource {
 public:
  ViewBatches(std::shared_ptr<const Samples> data, int64_t batch_size, int64_t replicas, int64_t rank)
      : data_(std::move(data)), batch_(batch_size), replicas_(replicas), rank_(rank) {}
  int64_t batch_size() const override { return batch_; }
  int64_t replicas() const override { return replicas_; }
  int64_t steps_per_epoch() const override { return data_->size / (batch_ * replicas_); }
  void seek(LoaderPosition p) override {
    if (p.step_in_epoch < 0 || p.step_in_epoch > steps_per_epoch()) throw std::out_of_range("seek: step out of range");
    order_.resize(static_cast<size_t>(data_->size));
    for (int64_t i = 0; i < data_->size; ++i) order_[static_cast<size_t>(i)] = i;
    if (p.epoch > 0) std::shuffle(order_.begin(), order_.end(), std::mt19937_64(100 + p.epoch));
    pos_ = p;
  }
  LoaderPosition position() const override { return pos_; }
  std::optional<Batch> next() override {
    if (order_.empty()) seek(pos_);
    if (pos_.step_in_epoch >= steps_per_epoch()) return std::nullopt;
    const int64_t first = (pos_.step_in_epoch * replicas_ + rank_) * batch_, per = 2 * kView;
    std::vector<float> x(batch_ * per);
    Batch b;
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t src = order_[static_cast<size_t>(first + i)];
      std::copy_n(&data_->views[src * per], per, &x[i * per]);
      b.indices.push_back(src);
    }
    b.inputs = Tensor::from_vector(x, {batch_, 2, kView});  // no targets: the positives are the pairs
    b.epoch = pos_.epoch, b.step_in_epoch = pos_.step_in_epoch++;
    return b;
  }

 private:
  std::shared_ptr<const Samples> data_;
  int64_t batch_, replicas_, rank_;
  std::vector<int64_t> order_;
  LoaderPosition pos_;
};

// Top-1 retrieval within each evaluated batch: q_i's largest q_i . k_j is at j = i.
class Retrieval final : public Metric {
 public:
  std::string name() const override { return "retrieval"; }
  void reset() override { hits_ = rows_ = 0; }
  void add(std::span<const Tensor> outputs, std::span<const Tensor>) override {
    const std::vector<float> q = outputs[0].to_vector(), k = outputs[1].to_vector();
    const int64_t n = outputs[0].dim(0), d = outputs[0].dim(1);
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      double best_dot = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[i * d + c]) * k[j * d + c];
        if (dot > best_dot) best_dot = dot, best = j;
      }
      hits_ += best == i;
    }
    rows_ += n;
  }
  double value() const override { return rows_ ? static_cast<double>(hits_) / static_cast<double>(rows_) : 0; }

 private:
  int64_t hits_ = 0, rows_ = 0;
};

struct Args {
  Mode mode = Mode::single;
  int64_t epochs = 8, global_batch = 96, devices = 1, samples = 3072;  // 96: 1, 2, 3 or 4 replicas
  double lr = 0.02;
};
constexpr const char* kUsage = "usage: contrastive [--mode single|dp|ddp] [--epochs N] [--global-batch N] [--lr X] "
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
    std::fprintf(stderr, "contrastive: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    ParallelOptions po;
    po.mode = a.mode, po.devices = static_cast<int>(a.devices);
    InfoNceOptions nce;
    nce.symmetric = true;
    po.loss = [nce](const LossContext& ctx) { return std::make_unique<InfoNce>(ctx.group, nce); };  // ddp: the group
    po.metrics = [] {
      Metrics m;
      m.push_back(std::make_unique<Retrieval>());
      return m;
    };
    auto make_model = [] {
      auto m = std::make_unique<TwoViewEncoder>();
      m->reset_parameters(/*seed=*/0);
      return m;
    };
    OptimizerConfig adamw;
    adamw.kind = OptimizerKind::adamw;
    std::unique_ptr<Strategy> s = parallelize(make_model, adamw, po);
    const bool lead = s->rank() == 0, ddp = a.mode == Mode::ddp;
    if (a.global_batch % s->replicas() != 0)
      throw std::invalid_argument("--global-batch " + std::to_string(a.global_batch) + " does not split over " +
                                  std::to_string(s->replicas()) + " replicas");
    auto train = std::make_shared<const Samples>(make_samples(a.samples, 1));
    auto test = std::make_shared<const Samples>(make_samples(512, 2));
    const int64_t replicas = ddp ? s->replicas() : 1, per_process = ddp ? a.global_batch / replicas : a.global_batch;
    ViewBatches batches(train, per_process, replicas, s->rank());
    ViewBatches held_out(test, 128, 1, 0);
    const int64_t total = a.epochs * batches.steps_per_epoch();
    LrSchedule schedule(static_cast<float>(a.lr), total / 20, total);
    const double before = *s->evaluate(held_out).metric("retrieval");
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
      batches.set_epoch(epoch);
      StepOutput out;
      while (std::optional<Batch> batch = batches.next()) {
        out = s->forward_backward(*batch);  // gradients of the global batch's mean InfoNCE loss
        s->step(schedule.at(step++));
      }
      const double loss = s->global_loss(out.loss());  // a collective under ddp
      if (lead && (epoch + 1) % 2 == 0) std::printf("epoch %lld/%lld loss %.4f\n", (long long)epoch + 1, (long long)a.epochs, loss);
    }
    const EvalResult r = s->evaluate(held_out);  // every rank, the whole held-out set
    if (lead)
      std::printf("test_loss %.9g\nparam_checksum %s\ncontrastive: mode %s, world %d, retrieval %.4f (before training %.4f)\n",
                  r.loss, parameter_checksum(s->model()).c_str(), s->mode(), ddp ? s->replicas() : 1,
                  *r.metric("retrieval"), before);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "contrastive: %s\n", e.what());
    return 1;
  }
}
