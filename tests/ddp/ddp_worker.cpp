// DDP multi-process test worker: run one scenario on every rank (under mpirun or
// spawn_local.sh) and exit 0 only if its checks hold on this rank.
//   equivalence  DDP(N) with per-rank batch b == single process with batch N*b (5 steps)
//   gradients    the zoo's MLP and CNN: after one DDP backward every parameter's averaged
//                gradient equals the single-process gradient on the concatenated global
//                batch within 1e-5 relative per tensor (several buckets; checked again on
//                a second backward, after the reducer's rebuild)
//   identical    50 steps of momentum SGD from per-rank seeds: every rank's parameters
//                are bit-identical (all-gathered bytes, compared on every rank)
//   no_overlap   the same parameters, bit for bit, as with overlap
//   uneven       ranks holding 10, 7, 3 (, 5) batches under join: no hang, each step == single
//                on the samples seen (plain, ZeRO-1, fp16 hook)
//   uneven_throw the same under throw_on_early_termination: every rank stops, naming the rank
//   no_sync      two calls under no_sync and one after == single under no_sync (the sum)
//   grad_accum   DDP with K=4 micro-batches == single process with one batch of 4*N*b
//   unused       branch model: with find_unused it trains and matches single; without, the
//                first step fails naming the unused parameters and the option
//   hooks        fp16 and bf16 compression stay within 1e-2 of f32 and replicas agree
//   mismatch     rank 1 builds a different model: construction fails naming it
//   buckets      layout rules: reverse order, first bucket capped, grads are views
//   gpt          a small GPT (tied embedding, nested blocks): the DDP gradients of two
//                backwards equal single-process gradients on the concatenated windows
//                within 1e-5 per tensor, wte.weight (used twice) included; then 50 AdamW
//                steps with clipping leave every rank's parameters bit-identical
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/init.h"
#include "zoo/zoo.h"
#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/strategy/ddp.h"
#include "runtime/host_collectives.h"
#include "runtime/strategy/single.h"
#include "tests/ddp/branch_model.h"
#include "tests/ddp/scenario_main.h"
#include "tests/support/compare.h"

using namespace tandem;

namespace {

int g_rank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

std::unique_ptr<Model> mlp(int64_t hidden = 32) {
  auto m = std::make_unique<Model>();
  m->add("fc1", std::make_unique<Linear>(16, hidden));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(hidden, hidden));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("fc3", std::make_unique<Linear>(hidden, 4));
  m->reset_parameters(42);
  return m;
}

// The samples a test model reads: the worker's small MLP (16 features, 4 classes) or
// the zoo's models (MNIST-shaped images, 10 classes).
struct DataShape {
  Shape sample;
  int32_t classes;
};
const DataShape kSmall{{16}, 4};
const DataShape kMnist{{1, 28, 28}, 10};

Batch make_batch(std::vector<float> x, std::vector<int32_t> y, const Shape& sample) {
  Shape shape{static_cast<int64_t>(y.size())};
  shape.insert(shape.end(), sample.begin(), sample.end());
  Batch b;
  b.inputs = Tensor::from_vector(x, shape);
  b.labels = Tensor::empty({shape[0]}, DType::i32);
  std::memcpy(b.labels.raw(), y.data(), y.size() * sizeof(int32_t));
  return b;
}

// Global batch `step` of `rows` samples, deterministic.
Batch global_batch(int64_t step, int64_t rows, const DataShape& d = kSmall) {
  std::vector<float> x(rows * shape_numel(d.sample));
  std::vector<int32_t> y(rows);
  uint64_t s = 0x9e3779b97f4a7c15ull * (step + 1);
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  }
  for (int64_t i = 0; i < rows; ++i) y[i] = static_cast<int32_t>((i * 7 + step) % d.classes);
  return make_batch(std::move(x), std::move(y), d.sample);
}

Shape sample_shape(const Batch& b) { return Shape(b.inputs.shape().begin() + 1, b.inputs.shape().end()); }

// Rows r, r+R, ... of a global batch: replica r's share (the sampler's interleaving).
Batch shard(const Batch& g, int rank, int world) {
  const int64_t rows = g.inputs.dim(0) / world, n = shape_numel(sample_shape(g));
  std::vector<float> x(rows * n);
  std::vector<int32_t> y(rows);
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t src = rank + j * world;
    std::memcpy(&x[j * n], g.inputs.f32() + src * n, n * sizeof(float));
    y[j] = g.labels.data<int32_t>()[src];
  }
  return make_batch(std::move(x), std::move(y), sample_shape(g));
}

// The batches one after another: what one K-times larger batch holds.
Batch concat(const std::vector<Batch>& parts) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (const Batch& b : parts) {
    const float* px = b.inputs.f32();
    const int32_t* py = b.labels.data<int32_t>();
    x.insert(x.end(), px, px + b.inputs.numel());
    y.insert(y.end(), py, py + b.labels.numel());
  }
  return make_batch(std::move(x), std::move(y), sample_shape(parts.front()));
}

ReducerOptions small_buckets() {
  ReducerOptions o;
  o.bucket_cap_bytes = 4096;  // several buckets even for this small model
  o.first_bucket_cap_bytes = 1024;
  return o;
}

OptimizerConfig sgd() { return OptimizerConfig{}; }

// Trains `steps` steps in DDP (each rank: `accum` micro-batches of `per_rank` rows) and
// in a single-process reference given the whole global batch at once (accum * N *
// per_rank rows); returns the max relative parameter difference.
double train_pair(std::shared_ptr<ProcessGroup> pg, ReducerOptions ro, int64_t per_rank, int64_t accum, int steps,
                  std::unique_ptr<DdpStrategy>* keep = nullptr) {
  const int world = pg->size();
  auto ddp = std::make_unique<DdpStrategy>(mlp(), sgd(), Device::cpu(), pg, ro);
  SingleStrategy single(mlp(), sgd(), Device::cpu());
  for (int s = 0; s < steps; ++s) {
    PhaseTimes t;
    std::vector<Batch> micro, whole;
    for (int64_t m = 0; m < accum; ++m) {
      Batch g = global_batch(s * accum + m, per_rank * world);
      micro.push_back(shard(g, pg->rank(), world));
      whole.push_back(g);
    }
    ddp->forward_backward(micro, t);
    ddp->step(0.1f, t);
    std::vector<Batch> one{concat(whole)};  // the K*N*b batch, not K micro-batches
    single.forward_backward(one, t);
    single.step(0.1f, t);
  }
  check(ddp->replicas_identical(), "replicas identical");
  double d = testing::max_relative_difference(ddp->model(), single.model());
  if (keep) *keep = std::move(ddp);
  return d;
}

void equivalence(std::shared_ptr<ProcessGroup> pg) {
  double d = train_pair(pg, small_buckets(), 8, 1, 5);
  std::printf("equivalence: max relative parameter difference %.3g\n", d);
  check(d < 1e-5, "DDP equals single with the global batch within 1e-5");
}

// Relative error of one gradient tensor: max_j |a_j - b_j| / max(max_j |b_j|, FLT_MIN),
// b the single-process reference. The floor only keeps an all-zero reference defined
// (then `a` must be all zero too).
struct TensorError {
  double error = 0;
  std::string name;
};

TensorError worst_gradient_error(const Model& ddp, const Model& ref) {
  TensorError worst;
  for (size_t i = 0; i < ref.parameters().size(); ++i) {
    auto a = ddp.parameters()[i]->grad.to_vector(), b = ref.parameters()[i]->grad.to_vector();
    double scale = std::numeric_limits<float>::min(), diff = 0;
    for (size_t j = 0; j < b.size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(b[j])));
      diff = std::max(diff, std::fabs(static_cast<double>(a[j]) - b[j]));
    }
    if (diff / scale >= worst.error) worst = {diff / scale, ref.parameters()[i]->name};
  }
  return worst;
}

void gradients(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size();
  const int64_t per_rank = 4;
  ModelConfig mlp_config;
  mlp_config.name = "mlp";
  mlp_config.hidden = 32;
  ModelConfig cnn_config;
  cnn_config.name = "cnn";
  for (const ModelConfig& config : {mlp_config, cnn_config}) {
    DdpStrategy ddp(build_model(config, 7), sgd(), Device::cpu(), pg, small_buckets());
    SingleStrategy single(build_model(config, 7), sgd(), Device::cpu());
    check(ddp.buckets().size() >= 4, config.name + " is split into several buckets");
    // The second backward runs on the buckets as finalize left them (rebuilt or kept).
    for (int64_t pass = 0; pass < 2; ++pass) {
      PhaseTimes t;
      Batch g = global_batch(pass, per_rank * world, kMnist);
      std::vector<Batch> mine{shard(g, pg->rank(), world)}, all{g};
      ddp.forward_backward(mine, t);
      single.forward_backward(all, t);
      TensorError e = worst_gradient_error(ddp.model(), single.model());
      std::printf("gradients: %s on %d %s rank(s), %zu buckets, backward %lld: worst relative error %.3g (%s)\n",
                  config.name.c_str(), world, pg->backend_name().c_str(), ddp.buckets().size(),
                  static_cast<long long>(pass), e.error, e.name.c_str());
      check(e.error <= 1e-5, config.name + " gradient of " + e.name + " within 1e-5 of single");
    }
  }
}

void identical(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  // Per-rank seeds: only the constructor's broadcast makes the replicas start equal.
  auto m = mlp();
  m->reset_parameters(42 + rank);
  DdpStrategy ddp(std::move(m), sgd(), Device::cpu(), pg, small_buckets());
  check(sgd().momentum > 0, "momentum SGD");
  const std::vector<float> start = ddp.model().parameters().front()->value.to_vector();
  for (int64_t s = 0; s < 50; ++s) {
    PhaseTimes t;
    std::vector<Batch> mine{shard(global_batch(s, 8 * world), rank, world)};
    ddp.forward_backward(mine, t);
    ddp.step(0.05f, t);
  }
  // Every rank's parameter bytes, all-gathered, so every rank compares all of them.
  const auto& params = ddp.model().parameters();
  size_t bytes = 0;
  for (const Parameter* p : params) bytes += p->value.nbytes();
  std::vector<uint8_t> all(bytes * world);
  size_t at = rank * bytes;
  for (const Parameter* p : params) {
    std::memcpy(&all[at], p->value.raw(), p->value.nbytes());
    at += p->value.nbytes();
  }
  host_allgather(*pg, cpu_buffer(all.data(), static_cast<int64_t>(all.size())), Device::cpu(), pg->timeout());
  for (int r = 1; r < world; ++r) {
    size_t off = 0;
    for (const Parameter* p : params) {
      check(std::memcmp(&all[r * bytes + off], &all[off], p->value.nbytes()) == 0,
            "after 50 steps rank " + std::to_string(r) + "'s " + p->name + " is bit-identical to rank 0's");
      off += p->value.nbytes();
    }
  }
  check(ddp.replicas_identical(), "replicas_identical() agrees");
  for (const Parameter* p : params)
    for (float v : p->value.to_vector()) check(std::isfinite(v), p->name + " stayed finite");
  check(params.front()->value.to_vector() != start, "training moved the parameters");
  std::printf("identical: %zu parameter bytes bit-identical on %d ranks after 50 steps\n", bytes, world);
}

void no_overlap(std::shared_ptr<ProcessGroup> pg) {
  std::unique_ptr<DdpStrategy> a, b;
  ReducerOptions ro = small_buckets();
  train_pair(pg, ro, 8, 1, 3, &a);
  ro.overlap = false;
  train_pair(pg, ro, 8, 1, 3, &b);
  check(parameter_checksum(a->model()) == parameter_checksum(b->model()), "overlap on/off bit-identical");
}

void grad_accum(std::shared_ptr<ProcessGroup> pg) {
  double d = train_pair(pg, small_buckets(), 4, 4, 4);
  std::printf("grad_accum: K=4, max relative parameter difference %.3g\n", d);
  check(d < 1e-5, "K=4 accumulation equals the 4x batch within 1e-5");
}

void unused(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size();
  auto make = [] {
    auto m = std::make_unique<testing::BranchModel>();
    m->reset_parameters(3);
    return m;
  };
  {  // find_unused on: trains, matches single
    ReducerOptions ro = small_buckets();
    ro.find_unused = true;
    auto m = make();
    testing::BranchModel* ddp_model = m.get();
    DdpStrategy ddp(std::move(m), sgd(), Device::cpu(), pg, ro);
    auto r = make();
    testing::BranchModel* ref_model = r.get();
    SingleStrategy single(std::move(r), sgd(), Device::cpu());
    for (int s = 0; s < 4; ++s) {
      ddp_model->set_step(s);
      ref_model->set_step(s);
      PhaseTimes t;
      Batch g = global_batch(s, 4 * world);
      std::vector<Batch> mine{shard(g, pg->rank(), world)}, all{g};
      ddp.forward_backward(mine, t);
      ddp.step(0.1f, t);
      single.forward_backward(all, t);
      single.step(0.1f, t);
    }
    check(ddp.replicas_identical(), "replicas identical with unused parameters");
    double d = testing::max_relative_difference(ddp.model(), single.model());
    std::printf("unused: find_unused on, max relative difference %.3g\n", d);
    check(d < 1e-5, "find_unused DDP equals single");
  }
  {  // off: the first backward fails with a message naming the parameters and the option
    DdpStrategy ddp(make(), sgd(), Device::cpu(), pg, small_buckets());
    PhaseTimes t;
    Batch g = global_batch(0, 4 * world);
    std::vector<Batch> mine{shard(g, pg->rank(), world)};
    std::string err;
    try {
      ddp.forward_backward(mine, t);
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::printf("unused: find_unused off -> %s\n", err.c_str());
    check(err.find("odd.weight") != std::string::npos, "error names odd.weight");
    check(err.find("odd.bias") != std::string::npos, "error names odd.bias");
    check(err.find("find_unused_parameters") != std::string::npos, "error names the option");
    check(err.find("even.weight") == std::string::npos, "error does not name used parameters");
  }
}

void hooks(std::shared_ptr<ProcessGroup> pg) {
  std::unique_ptr<DdpStrategy> f32;
  train_pair(pg, small_buckets(), 8, 1, 3, &f32);
  for (CommHookKind kind : {CommHookKind::fp16, CommHookKind::bf16}) {
    ReducerOptions ro = small_buckets();
    ro.hook = kind;
    std::unique_ptr<DdpStrategy> c;
    train_pair(pg, ro, 8, 1, 3, &c);
    double d = testing::max_relative_difference(c->model(), f32->model());
    std::printf("hooks: %s vs f32 max relative difference %.3g\n", comm_hook_str(kind), d);
    check(d < 1e-2, std::string(comm_hook_str(kind)) + " within 1e-2 of f32");
    check(d > 0, std::string(comm_hook_str(kind)) + " actually compressed");
  }
}

void mismatch(std::shared_ptr<ProcessGroup> pg) {
  std::string err;
  try {
    DdpStrategy ddp(mlp(pg->rank() == 1 ? 24 : 32), sgd(), Device::cpu(), pg, small_buckets());
  } catch (const std::exception& e) {
    err = e.what();
  }
  std::printf("mismatch -> %s\n", err.c_str());
  check(err.find("fc1.weight") != std::string::npos, "names the first differing parameter");
  check(err.find("ranks differing from rank 0: 1") != std::string::npos, "names rank 1");
}

void buckets(std::shared_ptr<ProcessGroup> pg) {
  DdpStrategy ddp(mlp(), sgd(), Device::cpu(), pg, small_buckets());
  auto layout = ddp.reducer().bucket_layout();
  auto info = ddp.buckets();
  auto params = ddp.model().parameters();
  // Reverse registration order across buckets.
  size_t expect = params.size();
  for (auto& b : layout)
    for (size_t idx : b) check(idx == --expect, "bucket order is reverse registration order");
  check(info[0].bytes <= 1024 || info[0].parameters == 1, "first bucket within its 1 KiB cap");
  for (size_t i = 1; i < info.size(); ++i)
    check(info[i].bytes <= 4096 || info[i].parameters == 1, "bucket within the cap or a lone parameter");
  // fc2.weight is 32x32 f32 = 4096 B: fits exactly; fc1.weight 32x16 = 2048 B.
  for (size_t b = 0; b < layout.size(); ++b) {
    for (size_t idx : layout[b]) {
      Parameter* p = params[idx];
      check(p->grad.storage() != params[layout[b][0]]->value.storage(), "grad is not the parameter");
      check(p->grad.shares_storage_with(params[layout[b][0]]->grad), "grads of a bucket share its buffer");
    }
  }
  PhaseTimes t;
  Batch g = global_batch(0, 8 * pg->size());
  std::vector<Batch> mine{shard(g, pg->rank(), pg->size())};
  ddp.forward_backward(mine, t);
  check(ddp.reducer().rebuilt(), "buckets rebuilt after the first backward");
  std::printf("buckets: %zu buckets:", info.size());
  for (auto& i : info) std::printf(" %lld B/%lld params", (long long)i.bytes, (long long)i.parameters);
  std::printf("\n");
}

}  // namespace

// Token windows for the GPT scenario: rows of T ids, labels the next id at each position.
Batch token_batch(int64_t step, int64_t rows, int64_t t, int32_t vocab) {
  Batch b;
  b.inputs = Tensor::empty({rows, t}, DType::i32);
  b.labels = Tensor::empty({rows * t}, DType::i32);
  uint64_t s = 0x2545f4914f6cdd1dull * (step + 3);
  std::vector<int32_t> seq(t + 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t& v : seq) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<int32_t>((s >> 33) % vocab);
    }
    std::copy(seq.begin(), seq.end() - 1, b.inputs.data<int32_t>() + r * t);
    std::copy(seq.begin() + 1, seq.end(), b.labels.data<int32_t>() + r * t);
  }
  return b;
}

// Rows rank*b .. rank*b+b-1 of a global token batch (the text loader's contiguous shares).
Batch token_shard(const Batch& g, int rank, int world) {
  const int64_t rows = g.inputs.dim(0) / world, t = g.inputs.dim(1);
  Batch b;
  b.inputs = Tensor::empty({rows, t}, DType::i32);
  b.labels = Tensor::empty({rows * t}, DType::i32);
  std::memcpy(b.inputs.raw(), g.inputs.data<int32_t>() + rank * rows * t, rows * t * sizeof(int32_t));
  std::memcpy(b.labels.raw(), g.labels.data<int32_t>() + rank * rows * t, rows * t * sizeof(int32_t));
  return b;
}

void gpt(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  ModelConfig config;
  config.name = "gpt";
  config.classes = 17;
  config.gpt = GptConfig{17, 2, 2, 16, 8, 0.f};
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 0.1f;
  adamw.clip_grad_norm = 0.5f;
  DdpStrategy ddp(build_model(config, 11), adamw, Device::cpu(), pg, small_buckets());
  SingleStrategy single(build_model(config, 11), adamw, Device::cpu());
  check(ddp.buckets().size() >= 4, "gpt is split into several buckets");
  const int64_t per_rank = 3, t = 8;
  for (int64_t pass = 0; pass < 2; ++pass) {
    PhaseTimes times;
    Batch g = token_batch(pass, per_rank * world, t, 17);
    std::vector<Batch> mine{token_shard(g, rank, world)}, all{g};
    ddp.forward_backward(mine, times);
    single.forward_backward(all, times);
    TensorError e = worst_gradient_error(ddp.model(), single.model());
    const Parameter* wte_ddp = ddp.model().find("wte.weight");
    const Parameter* wte_single = single.model().find("wte.weight");
    double wte = 0, wte_scale = std::numeric_limits<float>::min();
    {
      auto a = wte_ddp->grad.to_vector(), b = wte_single->grad.to_vector();
      for (size_t j = 0; j < b.size(); ++j) {
        wte_scale = std::max(wte_scale, static_cast<double>(std::fabs(b[j])));
        wte = std::max(wte, std::fabs(static_cast<double>(a[j]) - b[j]));
      }
      wte /= wte_scale;
    }
    std::printf("gpt: %d %s rank(s), %zu buckets, backward %lld: worst relative gradient error %.3g (%s), "
                "tied wte.weight %.3g\n",
                world, pg->backend_name().c_str(), ddp.buckets().size(), static_cast<long long>(pass), e.error,
                e.name.c_str(), wte);
    check(e.error <= 1e-5, "gpt gradient of " + e.name + " within 1e-5 of single");
    check(wte <= 1e-5, "the tied wte.weight gradient (embedding + LM head) within 1e-5 of single");
  }
  for (int64_t s = 0; s < 50; ++s) {
    PhaseTimes times;
    std::vector<Batch> mine{token_shard(token_batch(100 + s, per_rank * world, t, 17), rank, world)};
    ddp.forward_backward(mine, times);
    ddp.step(1e-3f, times);
  }
  check(ddp.replicas_identical(), "gpt replicas bit-identical after 50 AdamW steps with clipping");
  std::printf("gpt: replicas bit-identical on %d ranks after 50 AdamW steps\n", world);
}

// no_sync: two calls inside the scope communicate nothing (no collective is issued) and
// the call after it reduces once; the gradients are the SUM of the three calls', as a
// single process computes them on the global batches (under no_sync too). step() on
// unreduced gradients is refused.
void no_sync(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size();
  DdpStrategy ddp(mlp(), sgd(), Device::cpu(), pg, small_buckets());
  SingleStrategy single(mlp(), sgd(), Device::cpu());
  double worst = 0;
  for (int s = 0; s < 3; ++s) {
    for (int c = 0; c < 3; ++c) {
      Batch g = global_batch(s * 3 + c, 8 * world);
      if (c < 2) {
        const uint64_t seq = pg->last_seq();
        {
          auto a = ddp.no_sync();
          auto b = single.no_sync();
          ddp.forward_backward(shard(g, pg->rank(), world));
          single.forward_backward(g);
        }
        check(pg->last_seq() == seq, "no collective inside no_sync");
        bool refused = false;
        try {
          ddp.step(0.1f);
        } catch (const std::logic_error& e) {
          refused = std::string(e.what()).find("no_sync") != std::string::npos;
        }
        check(refused, "step() after a no_sync call is refused, naming no_sync");
      } else {
        ddp.forward_backward(shard(g, pg->rank(), world));
        single.forward_backward(g);
      }
    }
    worst = std::max(worst, worst_gradient_error(ddp.model(), single.model()).error);
    ddp.step(0.1f);
    single.step(0.1f);
  }
  check(ddp.replicas_identical(), "replicas identical");
  std::printf("no_sync: max relative gradient difference %.3g\n", worst);
  check(worst < 1e-5, "DDP under no_sync equals single under no_sync within 1e-5");
}

// Uneven inputs: rank r holds kUnevenCounts[r] batches of 8 rows (rank 1's last one 5
// rows). Under join every rank loops until forward_backward says finished, which must be
// after exactly max(count) steps on every rank, and each step's result equals a single
// process on the samples the active ranks held in that step: gradients (plain DDP) or
// parameters (ZeRO-1, whose gradients are sharded) within 1e-5, parameters within 1e-2
// under the fp16 comm hook.
constexpr int64_t kUnevenCounts[] = {10, 7, 3, 5};

Batch uneven_batch(int rank, int64_t step) {
  const int64_t rows = rank == 1 && step == kUnevenCounts[1] - 1 ? 5 : 8;
  return global_batch(step * 10 + rank, rows);
}

void run_uneven(std::shared_ptr<ProcessGroup> pg, ReducerOptions ro, const char* what) {
  const int world = pg->size(), rank = pg->rank();
  DdpStrategy ddp(mlp(), sgd(), Device::cpu(), pg, ro);
  ddp.set_uneven_inputs(UnevenInputs::join);
  SingleStrategy single(mlp(), sgd(), Device::cpu());
  const bool exact = ro.zero_stage == 0 && ro.hook == CommHookKind::none;
  int64_t steps = 0;
  double worst = 0;
  for (;;) {
    std::vector<Batch> mine;
    if (steps < kUnevenCounts[rank]) mine.push_back(uneven_batch(rank, steps));
    StepOutput out = ddp.forward_backward(mine);
    if (out.done()) break;
    std::vector<Batch> seen;
    for (int r = 0; r < world; ++r)
      if (steps < kUnevenCounts[r]) seen.push_back(uneven_batch(r, steps));
    std::vector<Batch> one{concat(seen)};
    single.forward_backward(one);
    if (exact) worst = std::max(worst, worst_gradient_error(ddp.model(), single.model()).error);
    ddp.step(0.1f);
    single.step(0.1f);
    if (!exact) worst = std::max(worst, testing::max_relative_difference(ddp.model(), single.model()));
    ++steps;
  }
  const int64_t longest = *std::max_element(kUnevenCounts, kUnevenCounts + world);
  check(steps == longest, "the loop ends after the longest rank's " + std::to_string(longest) + " steps, not " +
                              std::to_string(steps));
  check(ddp.replicas_identical(), "replicas identical after uneven inputs");
  std::printf("uneven (%s): %lld steps, max relative %s difference %.3g\n", what, static_cast<long long>(steps),
              exact ? "gradient" : "parameter", worst);
  check(worst < (ro.hook == CommHookKind::none ? 1e-5 : 1e-2), "every step equals a single process on the samples seen");
}

void uneven(std::shared_ptr<ProcessGroup> pg) {
  run_uneven(pg, small_buckets(), "join");
  ReducerOptions zero = small_buckets();
  zero.zero_stage = 1;
  run_uneven(pg, zero, "join, zero-1");
  ReducerOptions fp16 = small_buckets();
  fp16.hook = CommHookKind::fp16;
  run_uneven(pg, fp16, "join, fp16 hook");
}

// throw_on_early_termination: every rank throws at the first step a rank is out of data
// (step 3: rank 2 held 3 batches), naming it; nothing hangs, and the group still works.
void uneven_throw(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  for (int zero_stage : {0, 1}) {
    ReducerOptions ro = small_buckets();
    ro.zero_stage = zero_stage;
    DdpStrategy ddp(mlp(), sgd(), Device::cpu(), pg, ro);
    ddp.set_uneven_inputs(UnevenInputs::throw_on_early_termination);
    const int64_t shortest = *std::min_element(kUnevenCounts, kUnevenCounts + world);
    int64_t steps = 0;
    std::string message;
    try {
      for (;; ++steps) {
        std::vector<Batch> mine;
        if (steps < kUnevenCounts[rank]) mine.push_back(uneven_batch(rank, steps));
        if (ddp.forward_backward(mine).done()) break;
        ddp.step(0.1f);
      }
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    std::string expected = "rank " + std::to_string(world == 2 ? 1 : 2) + " ran out of data at step " +
                           std::to_string(shortest);
    check(steps == shortest, "stopped at step " + std::to_string(shortest) + ", not " + std::to_string(steps));
    check(message.find(expected) != std::string::npos, "the message names '" + expected + "': " + message);
    check(message.find("throw_on_early_termination") != std::string::npos, "the message names the policy");
  }
  pg->barrier()->synchronize(std::chrono::seconds(60));
}

int main(int argc, char** argv) {
  // --backend NAME: what init_process_group is asked for (default auto).
  const std::map<std::string, Scenario> scenarios = {
      {"equivalence", equivalence}, {"gradients", gradients},   {"identical", identical},
      {"no_overlap", no_overlap},   {"grad_accum", grad_accum},
      {"unused", unused},           {"hooks", hooks},           {"mismatch", mismatch},
      {"buckets", buckets},         {"gpt", gpt},               {"no_sync", no_sync},
      {"uneven", uneven},           {"uneven_throw", uneven_throw}};
  return run_scenario_main(argc, argv, "ddp_worker", scenarios, g_rank);
}
