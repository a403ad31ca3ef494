// ZeRO-1 multi-process test worker (runtime/strategy/zero.h): run under mpirun or
// spawn_local.sh like ddp_worker; exits 0 only if every check holds on this rank.
//   zero  plain DDP and ZeRO-1 DDP trained side by side from the same start on the same
//         batches, 50 steps each, on models whose buckets do not divide by 2, 3 or 4 (so
//         shards cut across parameters and the last one ends in padding):
//           - momentum SGD on an MLP: bit-identical parameters where the all-reduce and the
//             reduce-scatter sum in the same order (2 ranks: a + b = b + a; shm: rank order
//             for both), else within 1e-6 relative;
//           - AdamW with weight decay and clipping on the MLP: bit-identical where the
//             order agrees (the clipping norm is summed in double on both sides), else
//             within 1e-6 relative;
//           - AdamW on a small GPT (tied embedding), with and without clipping:
//             bit-identical where the order agrees; else within 1e-5 after one step and
//             1e-3 after 50 (AdamW amplifies last-bit differences where gradients are
//             near eps, and training compounds them);
//           - the state: each rank holds at most its shard, all ranks together exactly the
//             plain state; gathered, it equals plain DDP's (as the parameters do); written
//             from plain DDP's and read back, it is bit-identical;
//           - a model whose forward skips the per-layer hook (branches) still trains like
//             plain DDP (its gathers are waited for before forward), and the sequential
//             ones wait per layer;
//           - zero_stage outside ddp, or with a comm hook, is refused.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
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
#include "runtime/strategy/parallel.h"
#include "tests/ddp/branch_model.h"
#include "tests/ddp/scenario_main.h"
#include "tests/support/compare.h"

using namespace tandem;

namespace {

int g_rank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// 16 -> 37 -> 29 -> 4: 1,851 parameters; with the small buckets below, buckets of 149,
// 1073 and 629 elements, none a multiple of 2, 3 or 4.
std::unique_ptr<Model> uneven_mlp() {
  auto m = std::make_unique<Model>();
  m->add("fc1", std::make_unique<Linear>(16, 37));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(37, 29));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("fc3", std::make_unique<Linear>(29, 4));
  m->reset_parameters(42);
  return m;
}

std::unique_ptr<Model> small_gpt() {
  ModelConfig config;
  config.name = "gpt";
  config.classes = 17;
  config.gpt = GptConfig{17, 2, 2, 16, 8, 0.f};
  return build_model(config, 11);
}

ReducerOptions small_buckets(int zero_stage) {
  ReducerOptions o;
  o.bucket_cap_bytes = 4096;
  o.first_bucket_cap_bytes = 1024;
  o.zero_stage = zero_stage;
  o.find_unused = true;  // the branch model leaves a branch unused every step
  return o;
}

// This rank's share (rows rank, rank+W, ...) of global batch `step`: 16 features, 4 classes.
Batch mlp_batch(int64_t step, int64_t per_rank, int rank, int world) {
  const int64_t rows = per_rank * world;
  std::vector<float> x(rows * 16);
  uint64_t s = 0x9e3779b97f4a7c15ull * (step + 1);
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  }
  Batch b;
  b.inputs = Tensor::empty({per_rank, 16});
  b.labels = Tensor::empty({per_rank}, DType::i32);
  for (int64_t j = 0; j < per_rank; ++j) {
    const int64_t src = rank + j * world;
    std::memcpy(b.inputs.f32() + j * 16, &x[src * 16], 16 * sizeof(float));
    b.labels.data<int32_t>()[j] = static_cast<int32_t>((src * 7 + step) % 4);
  }
  return b;
}

// This rank's rows of global token batch `step`: rows of 8 ids < 17, labels the next id.
Batch gpt_batch(int64_t step, int64_t per_rank, int rank) {
  const int64_t t = 8;
  Batch b;
  b.inputs = Tensor::empty({per_rank, t}, DType::i32);
  b.labels = Tensor::empty({per_rank * t}, DType::i32);
  uint64_t s = 0x2545f4914f6cdd1dull * (step + 3) + static_cast<uint64_t>(rank) * 0x632be59bd9b4e019ull;
  std::vector<int32_t> seq(t + 1);
  for (int64_t r = 0; r < per_rank; ++r) {
    for (int32_t& v : seq) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<int32_t>((s >> 33) % 17);
    }
    std::copy(seq.begin(), seq.end() - 1, b.inputs.data<int32_t>() + r * t);
    std::copy(seq.begin() + 1, seq.end(), b.labels.data<int32_t>() + r * t);
  }
  return b;
}

// Whether an all-reduce and a reduce-scatter of this group add the ranks' values in the
// same order, so that ZeRO's gradients are bit-identical to plain DDP's.
bool same_reduction_order(const ProcessGroup& pg) { return pg.size() <= 2 || pg.backend_name() == "shm"; }

bool bit_identical(const Model& a, const Model& b) {
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    const Tensor &x = a.parameters()[i]->value, &y = b.parameters()[i]->value;
    if (std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0) return false;
  }
  return true;
}

using Factory = std::function<std::unique_ptr<Model>()>;
using BatchFn = std::function<Batch(int64_t step)>;

struct Pair {
  std::unique_ptr<DdpStrategy> plain, zero;
};

// Plain DDP and ZeRO-1 from the same model, `steps` steps on the same batches.
Pair train_both(std::shared_ptr<ProcessGroup> pg, const Factory& make, const OptimizerConfig& oc, const BatchFn& batch,
                int steps, float lr, const std::function<void(Model&, int64_t)>& before_step = nullptr) {
  Pair p;
  p.plain = std::make_unique<DdpStrategy>(make(), oc, Device::cpu(), pg, small_buckets(0));
  p.zero = std::make_unique<DdpStrategy>(make(), oc, Device::cpu(), pg, small_buckets(1));
  for (int64_t s = 0; s < steps; ++s) {
    for (DdpStrategy* d : {p.plain.get(), p.zero.get()}) {
      if (before_step) before_step(d->model(), s);
      std::vector<Batch> mine{batch(s)};
      PhaseTimes t;
      d->forward_backward(mine, t);
      d->step(lr, t);
    }
  }
  return p;
}

// Equivalence of one model and optimizer; returns the pair for the state checks.
Pair equivalence(std::shared_ptr<ProcessGroup> pg, const std::string& what, const Factory& make,
                 const OptimizerConfig& oc, const BatchFn& batch, bool expect_bits, float lr = 0.05f,
                 int steps = 50, double tolerance = 1e-6) {
  const std::vector<float> start = make()->parameters().front()->value.to_vector();
  Pair p = train_both(pg, make, oc, batch, steps, lr);
  const double d = testing::max_relative_difference(p.zero->model(), p.plain->model());
  const bool bits = bit_identical(p.zero->model(), p.plain->model());
  std::printf("zero: %s on %d %s rank(s): ZeRO-1 vs plain DDP after %d steps: %s, max relative difference %.3g\n",
              what.c_str(), pg->size(), pg->backend_name().c_str(), steps, bits ? "bit-identical" : "not bit-identical",
              d);
  if (expect_bits) check(bits, what + ": ZeRO-1 bit-identical to plain DDP (same reduction order)");
  check(d <= tolerance, what + ": ZeRO-1 within " + std::to_string(tolerance) + " relative of plain DDP");
  check(p.zero->replicas_identical(), what + ": ZeRO-1 replicas bit-identical");
  check(p.zero->model().parameters().front()->value.to_vector() != start, what + ": training moved the parameters");
  return p;
}

// The states of two plain-layout optimizers: max relative difference, and bitwise equality.
std::pair<double, bool> compare_state(Optimizer& a, Optimizer& b) {
  auto sa = a.state(), sb = b.state();
  check(sa.size() == sb.size(), "same state tensors");
  double worst = 0;
  bool bits = true;
  for (size_t i = 0; i < sa.size(); ++i) {
    check(sa[i].first == sb[i].first, "same state names");
    auto va = sa[i].second.to_vector(), vb = sb[i].second.to_vector();
    double scale = 1e-6, diff = 0;
    for (size_t j = 0; j < va.size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(vb[j])));
      diff = std::max(diff, std::fabs(static_cast<double>(va[j]) - vb[j]));
    }
    worst = std::max(worst, diff / scale);
    bits = bits && std::memcmp(sa[i].second.raw(), sb[i].second.raw(), sa[i].second.nbytes()) == 0;
  }
  return {worst, bits};
}

void state_checks(std::shared_ptr<ProcessGroup> pg, Pair& p, bool expect_bits, const std::string& what) {
  const int world = pg->size();
  DdpStrategy& zero = *p.zero;
  Optimizer& plain_opt = p.plain->optimizer();
  check(zero.zero_stage() == 1 && p.plain->zero_stage() == 0, "zero_stage() reports the stage");
  check(zero.optimizer().sharded(), "ZeRO's optimizer is sharded");
  std::string err;
  try {
    zero.optimizer().state();
  } catch (const std::logic_error& e) {
    err = e.what();
  }
  check(err.find("with_full_optimizer") != std::string::npos, "a sharded state() refuses, naming the way out");

  // Memory: each rank at most the largest shard; all ranks together exactly the plain state.
  const int64_t full = plain_opt.state_bytes();
  std::vector<int64_t> per_rank = zero.per_rank(zero.optimizer().state_bytes());
  int64_t total = 0, largest_shard = 0;
  for (int64_t b : per_rank) total += b;
  const auto layouts = zero.reducer().layouts();
  bool remainder = false;
  for (const BucketLayout& l : layouts) {
    largest_shard += l.padded / world;
    remainder = remainder || l.numel % world != 0;
    check(l.padded % world == 0 && l.padded - l.numel < world, "bucket padded to the next multiple of the world size");
  }
  largest_shard *= static_cast<int64_t>(plain_opt.slot_names().size() * sizeof(float));
  std::printf("zero: %s state %lld B on rank 0 of %d (plain %lld B, sum over ranks %lld B)\n", what.c_str(),
              static_cast<long long>(per_rank[0]), world, static_cast<long long>(full), static_cast<long long>(total));
  check(total == full, what + ": the shards add up to the plain state exactly");
  for (int64_t b : per_rank) check(b <= largest_shard, what + ": no rank holds more than one shard per bucket");
  check(world == 1 || remainder, what + ": some bucket does not divide by the world size (remainders exercised)");

  // Gathered state == plain DDP's state (as the parameters: bitwise where the order agrees).
  zero.with_full_optimizer(FullState::read, [&](Optimizer& gathered) {
    check(!gathered.sharded() && gathered.steps_taken() == plain_opt.steps_taken(), "gathered steps_taken");
    auto [d, bits] = compare_state(gathered, plain_opt);
    std::printf("zero: %s gathered state vs plain DDP's: %s, max relative difference %.3g\n", what.c_str(),
                bits ? "bit-identical" : "not bit-identical", d);
    if (expect_bits) check(bits, what + ": gathered state bit-identical to plain DDP's");
    check(d <= 1e-5, what + ": gathered state within 1e-5 of plain DDP's");
  });
  // Written from plain DDP's state and read back: pure data movement, bit for bit.
  zero.with_full_optimizer(FullState::write, [&](Optimizer& full) {
    auto dst = full.state(), src = plain_opt.state();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].second.copy_from(src[i].second);
    full.set_steps_taken(plain_opt.steps_taken() + 7);
  });
  zero.with_full_optimizer(FullState::read, [&](Optimizer& back) {
    check(compare_state(back, plain_opt).second, what + ": written state reads back bit-identical");
    check(back.steps_taken() == plain_opt.steps_taken() + 7, what + ": written steps_taken reads back");
  });
}

void zero_scenario(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  const bool same_order = same_reduction_order(*pg);

  OptimizerConfig sgd;  // momentum 0.9
  Pair p = equivalence(pg, "mlp sgd", uneven_mlp, sgd, [&](int64_t s) { return mlp_batch(s, 8, rank, world); },
                       same_order);
  state_checks(pg, p, same_order, "mlp sgd");
  check(p.zero->zero()->waits_per_layer(), "the MLP's forward waits for each bucket's gather per layer");

  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 0.1f;
  adamw.clip_grad_norm = 0.5f;
  Pair a = equivalence(pg, "mlp adamw+clip", uneven_mlp, adamw,
                       [&](int64_t s) { return mlp_batch(s, 8, rank, world); }, same_order, 1e-3f);
  state_checks(pg, a, same_order, "mlp adamw+clip");

  // The GPT under AdamW: elements whose gradient is near eps turn a last-bit difference
  // of their gradient into a visible one of their update (m / (sqrt(v) + eps)), and
  // training compounds it. So: bit-identical where the gradients' reduction order agrees,
  // with or without clipping (the clipping norm is summed in double on both sides, so its
  // float comes out the same); else (mpi and gloo at 3 and 4 ranks) within 1e-3.
  auto tokens = [&](int64_t s) { return gpt_batch(s, 3, rank); };
  OptimizerConfig adamw_noclip = adamw;
  adamw_noclip.clip_grad_norm = 0.f;
  Pair g = equivalence(pg, "gpt adamw", small_gpt, adamw_noclip, tokens, same_order, 1e-3f, 50,
                       same_order ? 0.0 : 1e-3);
  check(g.zero->zero()->waits_per_layer(), "the GPT's forward waits for each bucket's gather per layer");
  equivalence(pg, "gpt adamw+clip", small_gpt, adamw, tokens, same_order, 1e-3f, 1, same_order ? 0.0 : 1e-5);
  equivalence(pg, "gpt adamw+clip", small_gpt, adamw, tokens, same_order, 1e-3f, 50, same_order ? 0.0 : 1e-3);

  // A forward that skips the pre-hook: ZeRO waits for every gather before it.
  auto branch = [] {
    auto m = std::make_unique<testing::BranchModel>();
    m->reset_parameters(3);
    return m;
  };
  Pair b = train_both(pg, branch, sgd, [&](int64_t s) { return mlp_batch(s, 4, rank, world); }, 20, 0.05f,
                      [](Model& m, int64_t s) { static_cast<testing::BranchModel&>(m).set_step(s); });
  const double d = testing::max_relative_difference(b.zero->model(), b.plain->model());
  std::printf("zero: branch model (forward without the pre-hook): max relative difference %.3g\n", d);
  check(!b.zero->zero()->waits_per_layer(), "a forward that skips the pre-hook is not trusted to wait");
  check(d <= 1e-6 && (!same_order || bit_identical(b.zero->model(), b.plain->model())),
        "the branch model under ZeRO-1 trains like plain DDP");

  // Refused combinations.
  ParallelOptions po;
  po.zero_stage = 1;
  std::string err;
  try {
    parallelize(uneven_mlp, sgd, po);
  } catch (const std::invalid_argument& e) {
    err = e.what();
  }
  check(err.find("zero_stage needs Mode::ddp") != std::string::npos, "zero_stage outside ddp refused");
  err.clear();
  try {
    ReducerOptions ro = small_buckets(1);
    ro.hook = CommHookKind::fp16;
    DdpStrategy refused(uneven_mlp(), sgd, Device::cpu(), pg, ro);
  } catch (const std::invalid_argument& e) {
    err = e.what();
  }
  check(err.find("no comm hook") != std::string::npos, "ZeRO with a comm hook refused");
}

}  // namespace

int main(int argc, char** argv) {
  // --backend NAME: what init_process_group is asked for (default auto).
  const std::map<std::string, Scenario> scenarios = {
      {"zero", zero_scenario}};
  return run_scenario_main(argc, argv, "zero_worker", scenarios, g_rank);
}
