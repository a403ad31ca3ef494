// DDP multi-process test worker: run one scenario on every rank (under mpirun or
// spawn_local.sh) and exit 0 only if its checks hold on this rank.
//   equivalence  DDP(N) with per-rank batch b == single process with batch N*b (5 steps)
//   no_overlap   the same parameters, bit for bit, as with overlap
//   grad_accum   DDP with K=2 micro-batches == single process with batch 2*N*b
//   unused       branch model: with find_unused it trains and matches single; without, the
//                first step fails naming the unused parameters and the option
//   hooks        fp16 and bf16 compression stay within 1e-2 of f32 and replicas agree
//   mismatch     rank 1 builds a different model: construction fails naming it
//   buckets      layout rules: reverse order, first bucket capped, grads are views
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "collectives/init.h"
#include "runtime/kernels.h"
#include "tests/support/compare.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/strategy/ddp.h"
#include "runtime/strategy/single.h"
#include "tests/ddp/branch_model.h"

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

// Global batch `step` of `rows` samples (16 features, 4 classes), deterministic.
Batch global_batch(int64_t step, int64_t rows) {
  std::vector<float> x(rows * 16);
  Tensor labels = Tensor::empty({rows}, DType::i32);
  uint64_t s = 0x9e3779b97f4a7c15ull * (step + 1);
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  }
  for (int64_t i = 0; i < rows; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + step) % 4);
  Batch b;
  b.images = Tensor::from_vector(x, {rows, 16});
  b.labels = labels;
  return b;
}

// Rows r, r+R, ... of a global batch: replica r's share (the sampler's interleaving).
Batch shard(const Batch& g, int rank, int world) {
  int64_t rows = g.images.dim(0) / world;
  std::vector<float> x(rows * 16);
  Tensor labels = Tensor::empty({rows}, DType::i32);
  const float* gx = g.images.f32();
  for (int64_t j = 0; j < rows; ++j) {
    int64_t src = rank + j * world;
    std::memcpy(&x[j * 16], gx + src * 16, 16 * sizeof(float));
    labels.data<int32_t>()[j] = g.labels.data<int32_t>()[src];
  }
  Batch b;
  b.images = Tensor::from_vector(x, {rows, 16});
  b.labels = labels;
  return b;
}


ReducerOptions small_buckets() {
  ReducerOptions o;
  o.bucket_cap_bytes = 4096;  // several buckets even for this small model
  o.first_bucket_cap_bytes = 1024;
  return o;
}

OptimizerConfig sgd() { return OptimizerConfig{}; }

// Trains `steps` steps in DDP and in a single-process reference with the same global
// batch; returns the max relative parameter difference.
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
    single.forward_backward(whole, t);
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

void no_overlap(std::shared_ptr<ProcessGroup> pg) {
  std::unique_ptr<DdpStrategy> a, b;
  ReducerOptions ro = small_buckets();
  train_pair(pg, ro, 8, 1, 3, &a);
  ro.overlap = false;
  train_pair(pg, ro, 8, 1, 3, &b);
  check(parameter_checksum(a->model()) == parameter_checksum(b->model()), "overlap on/off bit-identical");
}

void grad_accum(std::shared_ptr<ProcessGroup> pg) {
  double d = train_pair(pg, small_buckets(), 4, 2, 4);
  std::printf("grad_accum: max relative parameter difference %.3g\n", d);
  check(d < 1e-5, "K=2 accumulation equals the 2x batch within 1e-5");
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

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ddp_worker SCENARIO\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const std::map<std::string, std::function<void(std::shared_ptr<ProcessGroup>)>> scenarios = {
      {"equivalence", equivalence}, {"no_overlap", no_overlap}, {"grad_accum", grad_accum},
      {"unused", unused},           {"hooks", hooks},           {"mismatch", mismatch},
      {"buckets", buckets}};
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  try {
    set_cpu_threads(1);
    InitOptions io;
    io.timeout = std::chrono::seconds(60);
    io.rendezvous_timeout = std::chrono::seconds(60);
    auto pg = init_process_group(io);
    g_rank = pg->rank();
    it->second(pg);
    pg->barrier()->synchronize(std::chrono::seconds(60));
    std::printf("ok: %s on rank %d of %d (%s)\n", scenario.c_str(), pg->rank(), pg->size(),
                pg->backend_name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s on rank %d: %s\n", scenario.c_str(), g_rank, e.what());
    return 1;
  }
  return 0;
}
