// custom_model: a model with a layer of your own, trained by a loop of your own on Fashion-MNIST,
// in any mode, against the installed package alone (find_package(Tandem), <tandem/tandem.h>).
//   Flatten -> fc1 784xH -> ReLU -> block: y = x + W2 relu(W1 x + b1) + b2 -> fc2 Hx10
// The block owns its parameters and calls the kernels itself; its backward ADDS into
// Parameter::grad (runtime/module.h), so DDP can own the gradient storage.
#include <tandem/tandem.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace tandem;

class ResidualBlock final : public Module {
 public:
  explicit ResidualBlock(int64_t width) : h_(width) {
    w1_ = &add_parameter("w1", {h_, h_}), b1_ = &add_parameter("b1", {h_});  // W (out, in), as Linear's
    w2_ = &add_parameter("w2", {h_, h_}), b2_ = &add_parameter("b2", {h_});
  }
  std::string kind() const override { return "ResidualBlock"; }  // names it in errors
  void reset_parameters(uint64_t seed) override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(h_));  // Linear's default
    for (Parameter* p : {w1_, b1_, w2_, b2_}) init_uniform(*p, seed, bound);
  }
  // x (N, H) -> y (N, H)
  Tensor forward(const Tensor& x) override {
    check_tensor(kind(), "input", x, device_);
    if (x.ndim() != 2 || x.dim(1) != h_) throw_shape_error(kind(), "input", "(N, H)", x.shape());
    const int64_t rows = x.dim(0), n = x.numel();
    Kernels& k = kernels_for(device_);
    Tensor a = reuse_buffer(a_cache_, x.shape(), device_);  // (N, H) W1 x + b1
    k.gemm(a.f32(), x.f32(), w1_->value.f32(), rows, h_, h_, false, true, 1.f, 0.f);
    k.add_bias_rows(a.f32(), b1_->value.f32(), rows, h_);
    hidden_ = reuse_buffer(h_cache_, x.shape(), device_);  // (N, H) relu(a)
    k.relu_forward(hidden_.f32(), a.f32(), n);
    Tensor y = reuse_buffer(y_cache_, x.shape(), device_);  // (N, H)
    k.copy(y.f32(), x.f32(), n);
    k.gemm(y.f32(), hidden_.f32(), w2_->value.f32(), rows, h_, h_, false, true, 1.f, 1.f);  // y += h W2^T
    k.add_bias_rows(y.f32(), b2_->value.f32(), rows, h_);
    x_ = x;
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    check_saved(kind(), x_.defined());
    check_tensor(kind(), "output gradient", dy, device_);
    const int64_t rows = x_.dim(0), n = x_.numel();
    Kernels& k = kernels_for(device_);
    // Parameter gradients: beta = 1 and *_acc add to what is there (never assign).
    k.gemm(grad_ptr(*w2_), dy.f32(), hidden_.f32(), h_, h_, rows, true, false, 1.f, 1.f);  // dW2 += dy^T h
    k.sum_rows_acc(grad_ptr(*b2_), dy.f32(), rows, h_);
    Tensor dh = reuse_buffer(dh_cache_, x_.shape(), device_);
    k.gemm(dh.f32(), dy.f32(), w2_->value.f32(), rows, h_, h_, false, false, 1.f, 0.f);  // dh = dy W2
    Tensor da = reuse_buffer(da_cache_, x_.shape(), device_);  // dh where h > 0 (not in place)
    k.relu_backward(da.f32(), dh.f32(), hidden_.f32(), n);
    k.gemm(grad_ptr(*w1_), da.f32(), x_.f32(), h_, h_, rows, true, false, 1.f, 1.f);  // dW1 += da^T x
    k.sum_rows_acc(grad_ptr(*b1_), da.f32(), rows, h_);
    Tensor dx = reuse_buffer(dx_cache_, x_.shape(), device_);
    k.copy(dx.f32(), dy.f32(), n);                                                       // the skip path
    k.gemm(dx.f32(), da.f32(), w1_->value.f32(), rows, h_, h_, false, false, 1.f, 1.f);  // dx += da W1
    x_ = hidden_ = Tensor();  // release what forward saved
    return dx;
  }
 private:
  int64_t h_;
  Parameter *w1_, *b1_, *w2_, *b2_;
  Tensor x_, hidden_;  // saved by forward for backward
  Tensor a_cache_, h_cache_, y_cache_, dh_cache_, da_cache_, dx_cache_;
};

std::unique_ptr<Model> build_model(const Dataset& data, int64_t hidden, uint64_t seed) {
  auto m = std::make_unique<Model>();
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(data.sample_numel(), hidden));  // 784 = 1x28x28
  m->add("relu", std::make_unique<ReLU>());
  m->add("block", std::make_unique<ResidualBlock>(hidden));
  m->add("fc2", std::make_unique<Linear>(hidden, data.classes));
  m->layer(1).set_needs_input_grad(false);  // fc1's input is data: skip that GEMM
  m->reset_parameters(seed);  // the same (seed, name) gives every replica the same start
  return m;
}

struct Args {
  Mode mode = Mode::single;
  std::string data_dir = kFashionMnistDefaultDir;
  int64_t epochs = 2, max_steps = 0, batch_size = 64, hidden = 256, devices = 1;  // max_steps 0: every epoch's
  double lr = 0.05;
};
constexpr const char* kUsage = "usage: custom_model [--mode single|dp|ddp] [--epochs N] [--max-steps N] "
                               "[--batch-size N] [--lr X] [--hidden N] [--devices N] [--data-dir DIR]\n";

Args parse_args(int argc, char** argv) {  // throws std::invalid_argument naming the flag
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": unknown flag, or its value is missing");
    auto number = [&](double min) {  // all of v, a number >= min
      char* end = nullptr;
      const double n = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(n >= min)) throw std::invalid_argument(flag + " must be a number >= " +
                                                                                  std::to_string(min) + ", got '" + v + "'");
      return n;
    };
    if (flag == "--mode") a.mode = parse_mode(v);
    else if (flag == "--data-dir") a.data_dir = v;
    else if (flag == "--lr") a.lr = number(0);
    else if (int64_t* n = flag == "--epochs" ? &a.epochs : flag == "--max-steps" ? &a.max_steps
                        : flag == "--batch-size" ? &a.batch_size : flag == "--hidden" ? &a.hidden
                        : flag == "--devices" ? &a.devices : nullptr)
      *n = static_cast<int64_t>(number(flag == "--max-steps" ? 0 : 1));
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
    std::fprintf(stderr, "custom_model: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    ParallelOptions po;  // BLAS threads: this process's share of the cores (dp: 1 per replica)
    po.mode = a.mode, po.devices = static_cast<int>(a.devices);
    auto train = std::make_shared<const Dataset>(load_fashion_mnist(a.data_dir, true));
    auto test = std::make_shared<const Dataset>(load_fashion_mnist(a.data_dir, false));
    const OptimizerConfig sgd;  // SGD, momentum 0.9
    std::unique_ptr<Strategy> s = parallelize([&] { return build_model(*train, a.hidden, /*seed=*/0); }, sgd, po);
    const bool lead = s->rank() == 0;
    std::unique_ptr<BatchSource> batches = training_batches(train, a.batch_size, *s, /*seed=*/0);
    const int64_t per_epoch = batches->steps_per_epoch();
    const int64_t total = a.max_steps > 0 ? std::min(a.epochs * per_epoch, a.max_steps) : a.epochs * per_epoch;
    LrSchedule schedule(static_cast<float>(a.lr), total / 20, total);  // 5% linear warm-up, then cosine to 0
    if (lead) std::printf("mode %s, replicas %d, %lld steps of %lld samples per replica\n", s->mode(), s->replicas(),
                          (long long)total, (long long)a.batch_size);
    for (int64_t step = 0; step < total;) {
      batches->set_epoch(step / per_epoch);
      for (std::optional<Batch> batch; step < total && (batch = batches->next());) {
        StepOutput out = s->forward_backward(*batch);  // grads of the GLOBAL batch's mean loss
        s->step(schedule.at(step++));
        if (step % 200 == 0 || step == total) {
          const double loss = s->global_loss(out.loss());  // every replica's mean (ddp: on every rank)
          if (lead) std::printf("step %lld/%lld loss %.4f\n", (long long)step, (long long)total, loss);
        }
      }
    }
    const EvalResult r = s->evaluate(*evaluation_batches(test));  // ddp: on every rank
    if (lead)
      std::printf("test_loss %.4f\ntest_accuracy %.4f\ncustom_model: mode %s, world %d, test_accuracy %.4f\n", r.loss,
                  r.metric("accuracy").value_or(0), s->mode(), a.mode == Mode::ddp ? s->replicas() : 1, r.metric("accuracy").value_or(0));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
