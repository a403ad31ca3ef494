// Reducer unit tests, in one process: bucket assignment, launch order, the rebuild,
// the errors, find_unused, no_overlap, --no-comm and the compression hooks. (Their
// numeric end-to-end counterparts run on real processes in tests/ddp.)
//
// MirrorGroup stands in for a group of two ranks whose peer holds exactly this rank's
// data, so every reduction has an exact expected value (sum doubles, avg keeps the
// buffer, broadcast keeps rank 0's = ours) and each op completes at once. It records
// every op it was given; a bucket's all-reduce is recognised by its buffer, which starts
// at the bucket's first gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/process_group.h"
#include "runtime/kernels.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/strategy/powersgd.h"
#include "runtime/strategy/reducer.h"

using namespace tandem;

namespace {

class MirrorGroup final : public ProcessGroup {
 public:
  struct Op {
    OpType op;
    ReduceOp reduce;
    const void* data;
    int64_t count;
    DType dtype;
  };

  explicit MirrorGroup(int size) : ProcessGroup(Setup{"mirror", 0, size, std::chrono::seconds(5), {}, {}}) {}
  std::vector<Op> ops;

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override {
    record(c);
    if (c.reduce == ReduceOp::sum) scale_in_place(c.out, static_cast<float>(size()));
    return completed(c);
  }
  std::shared_ptr<Work> run_broadcast(const Collective& c) override {
    record(c);
    return completed(c);
  }
  bool accepts(Device device) const override { return device.is_cpu(); }

 private:
  void record(const Collective& c) { ops.push_back({c.op, c.reduce, c.out.data, c.out.count, c.out.dtype}); }
  // x * size, exact for a power of two (16-bit values pass through f32 exactly).
  static void scale_in_place(const Buffer& b, float factor) {
    Kernels& k = kernels_for(Device::cpu());
    std::vector<float> f(b.count);
    auto* half = static_cast<uint16_t*>(b.data);
    if (b.dtype == DType::f32) {
      k.scale(static_cast<float*>(b.data), b.count, factor);
    } else if (b.dtype == DType::f16) {
      k.f16_to_f32(f.data(), half, b.count);
      k.scale(f.data(), b.count, factor);
      k.f32_to_f16(half, f.data(), b.count);
    } else if (b.dtype == DType::bf16) {
      k.bf16_to_f32(f.data(), half, b.count);
      k.scale(f.data(), b.count, factor);
      k.f32_to_bf16(half, f.data(), b.count);
    } else {
      throw std::invalid_argument("MirrorGroup: sum over " + std::string(dtype_name(b.dtype)));
    }
  }
  std::shared_ptr<Work> completed(const Collective& c) {
    auto work = std::make_shared<CompletionWork>(
        c, timeout(), [](const Collective& op, std::chrono::milliseconds) { return op.describe() + " timed out"; });
    work->finish();
    return work;
  }
};

// Parameters the test owns; names "p0", "p1", ... in registration order.
struct Params {
  std::vector<std::unique_ptr<Parameter>> owned;

  Parameter& add(int64_t numel, DType dtype = DType::f32) {
    auto p = std::make_unique<Parameter>();
    p->name = "p";
    p->name += std::to_string(owned.size());  // not "p" + ...: GCC 12's -Wrestrict false positive
    p->value = Tensor::zeros({numel}, dtype);
    p->grad = Tensor::zeros({numel}, dtype);
    owned.push_back(std::move(p));
    return *owned.back();
  }
  Parameter& operator[](size_t i) { return *owned[i]; }
  std::vector<Parameter*> pointers() const {
    std::vector<Parameter*> out;
    for (const auto& p : owned) out.push_back(p.get());
    return out;
  }
};

// Five f32 parameters, in registration order:
//   p0 100 floats (400 B), p1 50 (200 B), p2 300 (1200 B), p3 30 (120 B), p4 40 (160 B).
// With a first cap of 256 B and a cap of 1024 B, in reverse order:
//   bucket 0: p4            (p3 would make 280 B > the first cap, though < the cap)
//   bucket 1: p3            (p2 would make 1320 B > 1024)
//   bucket 2: p2            (1200 B > the cap: alone)
//   bucket 3: p1, p0        (600 B)
Params five_params() {
  Params ps;
  for (int64_t n : {100, 50, 300, 30, 40}) ps.add(n);
  return ps;
}

ReducerOptions small_caps() {
  ReducerOptions o;
  o.first_bucket_cap_bytes = 256;
  o.bucket_cap_bytes = 1024;
  return o;
}

using Layout = std::vector<std::vector<size_t>>;
const Layout kFiveLayout = {{4}, {3}, {2}, {1, 0}};

// Gradient i, element j: i + 1 + j/1000 (distinct per parameter and element).
float grad_value(size_t i, int64_t j) { return static_cast<float>(i + 1) + static_cast<float>(j) / 1000.f; }

void fill_grads(Params& ps) {
  for (size_t i = 0; i < ps.owned.size(); ++i)
    for (int64_t j = 0; j < ps[i].grad.numel(); ++j) ps[i].grad.f32()[j] = grad_value(i, j);
}

void expect_grads_filled(Params& ps) {
  for (size_t i = 0; i < ps.owned.size(); ++i)
    for (int64_t j = 0; j < ps[i].grad.numel(); ++j)
      ASSERT_EQ(ps[i].grad.f32()[j], grad_value(i, j)) << ps[i].name << "[" << j << "]";
}

struct Fixture {
  Params ps = five_params();
  std::shared_ptr<MirrorGroup> group = std::make_shared<MirrorGroup>(2);
  std::unique_ptr<Reducer> reducer;
  std::vector<const void*> bucket_starts;  // this backward's buckets, by first gradient

  explicit Fixture(ReducerOptions o = small_caps()) { reducer = std::make_unique<Reducer>(ps.pointers(), group, o); }

  // prepare_for_backward, remembering where this backward's buckets start (a rebuild
  // at the end of the first backward moves them).
  void prepare() {
    reducer->prepare_for_backward();
    bucket_starts.clear();
    for (const auto& bucket : reducer->bucket_layout()) bucket_starts.push_back(ps[bucket.front()].grad.raw());
  }
  void mark(std::initializer_list<size_t> indices) {
    for (size_t i : indices) reducer->mark_ready(ps[i]);
  }
  void finalize() {
    PhaseTimes t;
    reducer->finalize_backward(t);
  }
  // Bucket index of each all-reduce issued so far, in issue order (-1: not a bucket).
  std::vector<int> launched() const {
    std::vector<int> out;
    for (const MirrorGroup::Op& op : group->ops) {
      if (op.op != OpType::allreduce) continue;
      auto it = std::find(bucket_starts.begin(), bucket_starts.end(), op.data);
      out.push_back(it == bucket_starts.end() ? -1 : static_cast<int>(it - bucket_starts.begin()));
    }
    return out;
  }
  std::vector<MirrorGroup::Op> allreduces() const {
    std::vector<MirrorGroup::Op> out;
    for (const MirrorGroup::Op& op : group->ops)
      if (op.op == OpType::allreduce) out.push_back(op);
    return out;
  }
};

TEST(Reducer, BucketsFollowReverseOrderAndTheCaps) {
  Fixture f;
  EXPECT_EQ(f.reducer->bucket_layout(), kFiveLayout);
  std::vector<BucketInfo> info = f.reducer->bucket_info();
  ASSERT_EQ(info.size(), 4u);
  const std::vector<int64_t> bytes = {160, 120, 1200, 600}, counts = {1, 1, 1, 2};
  for (size_t b = 0; b < info.size(); ++b) {
    EXPECT_EQ(info[b].bytes, bytes[b]) << "bucket " << b;
    EXPECT_EQ(info[b].parameters, counts[b]) << "bucket " << b;
  }
  // Gradients are views of their bucket's buffer, back to back.
  EXPECT_TRUE(f.ps[1].grad.shares_storage_with(f.ps[0].grad));
  EXPECT_EQ(static_cast<char*>(f.ps[0].grad.raw()), static_cast<char*>(f.ps[1].grad.raw()) + 200);
  EXPECT_FALSE(f.ps[2].grad.shares_storage_with(f.ps[1].grad));
}

TEST(Reducer, ABucketMayReachItsCapExactly) {
  Params ps;
  for (int64_t n : {256, 32, 32}) ps.add(n);  // 1024 B, 128 B, 128 B
  Reducer r(ps.pointers(), std::make_shared<MirrorGroup>(2), small_caps());
  // 128 + 128 == the first cap; 1024 == the cap.
  EXPECT_EQ(r.bucket_layout(), (Layout{{2, 1}, {0}}));
}

TEST(Reducer, DTypesNeverShareABucket) {
  Params ps;
  ps.add(4);
  ps.add(4, DType::f16);
  ps.add(4);
  ReducerOptions o;  // default caps: everything would fit in one bucket
  Reducer r(ps.pointers(), std::make_shared<MirrorGroup>(2), o);
  EXPECT_EQ(r.bucket_layout(), (Layout{{2}, {1}, {0}}));
  EXPECT_EQ(ps[1].grad.dtype(), DType::f16);
}

TEST(Reducer, ParametersOfOneDTypeShareABucketUnderTheCap) {
  Params ps;
  for (int i = 0; i < 3; ++i) ps.add(4);
  Reducer r(ps.pointers(), std::make_shared<MirrorGroup>(2), ReducerOptions{});
  EXPECT_EQ(r.bucket_layout(), (Layout{{2, 1, 0}}));
}

TEST(Reducer, LaunchesInBucketOrderWhenALaterBucketIsReadyFirst) {
  Fixture f;
  f.prepare();
  f.mark({2});  // bucket 2 full; buckets 0 and 1 are not
  EXPECT_TRUE(f.launched().empty());
  f.mark({0, 1});  // bucket 3 full
  EXPECT_TRUE(f.launched().empty());
  f.mark({3});  // bucket 1 full, bucket 0 still waiting
  EXPECT_TRUE(f.launched().empty());
  f.mark({4});  // bucket 0: everything goes, in order
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3}));
  f.finalize();
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3})) << "finalize launches nothing twice";
}

TEST(Reducer, LaunchesEachBucketAsSoonAsItAndItsPredecessorsAreFull) {
  Fixture f;
  fill_grads(f.ps);
  f.prepare();
  f.mark({4});
  EXPECT_EQ(f.launched(), (std::vector<int>{0}));
  f.mark({3, 2});
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2}));
  f.mark({1});
  EXPECT_EQ(f.launched().size(), 3u);
  f.mark({0});
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3}));
  f.finalize();
  // Every bucket: one f32 average over exactly its elements; the average of two
  // identical copies is the gradient itself.
  const std::vector<int64_t> counts = {40, 30, 300, 150};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f.group->ops[i].reduce, ReduceOp::avg);
    EXPECT_EQ(f.group->ops[i].dtype, DType::f32);
    EXPECT_EQ(f.group->ops[i].count, counts[i]);
  }
  expect_grads_filled(f.ps);
  EXPECT_TRUE(f.reducer->rebuilt());
  EXPECT_EQ(f.reducer->bucket_layout(), kFiveLayout) << "the ready order was the bucket order";
}

TEST(Reducer, RebuildsBucketsInTheObservedReadyOrderOnce) {
  Fixture f;
  fill_grads(f.ps);
  void* old_p0 = f.ps[0].grad.raw();
  f.prepare();
  f.mark({0, 1, 2, 3, 4});  // registration order, the opposite of the initial buckets
  EXPECT_FALSE(f.reducer->rebuilt());
  f.finalize();
  ASSERT_TRUE(f.reducer->rebuilt());
  // Rank 0's order is broadcast (int64 indices) so every rank cuts the same buckets.
  ASSERT_EQ(f.group->ops.size(), 5u);
  EXPECT_EQ(f.group->ops.back().op, OpType::broadcast);
  EXPECT_EQ(f.group->ops.back().dtype, DType::i64);
  EXPECT_EQ(f.group->ops.back().count, 5);
  // Ready order 0 (400 B) 1 (200 B) 2 (1200 B) 3 (120 B) 4 (160 B), recut by the caps:
  // 400 > the first cap; 200 + 1200 > 1024; 1200 + 120 > 1024; 120 + 160 <= 1024.
  EXPECT_EQ(f.reducer->bucket_layout(), (Layout{{0}, {1}, {2}, {3, 4}}));
  EXPECT_NE(f.ps[0].grad.raw(), old_p0) << "gradients rebound to the new buckets";
  expect_grads_filled(f.ps);  // and their values carried over

  // The next backward launches in the new order, as buckets fill.
  f.group->ops.clear();
  f.prepare();
  f.mark({0});
  EXPECT_EQ(f.launched(), (std::vector<int>{0}));
  f.mark({1, 2, 3, 4});
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3}));
  f.finalize();

  // Only the first backward rebuilds: another order later changes nothing.
  f.group->ops.clear();
  f.prepare();
  f.mark({4, 3, 2, 1, 0});
  f.finalize();
  EXPECT_EQ(f.reducer->bucket_layout(), (Layout{{0}, {1}, {2}, {3, 4}}));
  for (const MirrorGroup::Op& op : f.group->ops) EXPECT_EQ(op.op, OpType::allreduce) << "no second broadcast";
}

TEST(Reducer, RebuildKeepsTheBuffersWhenTheOrderIsUnchanged) {
  Fixture f;
  void* before = f.ps[0].grad.raw();
  f.prepare();
  f.mark({4, 3, 2, 1, 0});
  f.finalize();
  EXPECT_TRUE(f.reducer->rebuilt());
  EXPECT_EQ(f.ps[0].grad.raw(), before);
}

TEST(Reducer, AParameterMarkedTwiceIsAnErrorNamingIt) {
  Fixture f;
  f.prepare();
  f.mark({4, 3});
  try {
    f.mark({3});
    FAIL() << "marking p3 twice did not throw";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'p3'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("twice"), std::string::npos) << msg;
  }
  Parameter stranger{"stranger", Tensor::zeros({1}), Tensor::zeros({1})};
  try {
    f.reducer->mark_ready(stranger);
    FAIL() << "an unmanaged parameter did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("stranger"), std::string::npos) << e.what();
  }
}

TEST(Reducer, AMissingGradientIsAnErrorNamingTheParametersAndTheOption) {
  Fixture f;
  f.prepare();
  f.mark({4, 3, 2, 0});  // p1 never arrives: bucket 3 has 1 of 2
  try {
    f.finalize();
    FAIL() << "finalize with p1 missing did not throw";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("1 parameter(s) received no gradient"), std::string::npos) << msg;
    EXPECT_NE(msg.find("p1"), std::string::npos) << msg;
    for (const char* used : {"p0", "p2", "p3", "p4"}) EXPECT_EQ(msg.find(used), std::string::npos) << msg;
    EXPECT_NE(msg.find("bucket 3: 1/2 params ready"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  }
  // Buckets 0-2 went out while backward ran; bucket 3 never did.
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2}));
}

TEST(Reducer, FindUnusedReducesUnusedGradientsAsZero) {
  ReducerOptions o = small_caps();
  o.find_unused = true;
  Fixture f(o);
  fill_grads(f.ps);
  for (size_t unused : {1, 3}) {
    Tensor& g = f.ps[unused].grad;
    kernels_for(Device::cpu()).fill(g.f32(), g.numel(), 0.f);  // as zero_grad left them
  }
  f.prepare();
  f.mark({4, 2, 0});  // bucket 1 (p3) empty, bucket 3 half full
  EXPECT_EQ(f.launched(), (std::vector<int>{0}));
  f.finalize();
  // Every bucket is reduced once, in order, so ranks where p1/p3 were used get them
  // averaged with this rank's zeros.
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3}));
  for (size_t i : {0, 2, 4})
    EXPECT_EQ(f.ps[i].grad.f32()[1], grad_value(i, 1)) << f.ps[i].name;
  for (size_t i : {1, 3})
    for (float v : f.ps[i].grad.to_vector()) ASSERT_EQ(v, 0.f) << f.ps[i].name;
}

TEST(Reducer, NoOverlapLaunchesOnlyAtFinalize) {
  ReducerOptions o = small_caps();
  o.overlap = false;
  Fixture f(o);
  f.prepare();
  f.mark({4, 3, 2, 1, 0});
  EXPECT_TRUE(f.group->ops.empty()) << "nothing launched during backward";
  f.finalize();
  EXPECT_EQ(f.launched(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Reducer, CommunicateOffLeavesGradientsLocal) {
  ReducerOptions o = small_caps();
  o.communicate = false;
  Fixture f(o);
  fill_grads(f.ps);
  f.prepare();
  f.mark({0, 1, 2, 3, 4});
  f.finalize();
  EXPECT_TRUE(f.group->ops.empty()) << "no all-reduce and no order broadcast";
  expect_grads_filled(f.ps);
}

// A model without parameters has nothing to reduce or reorder (the rebuild used to read
// the first parameter's device regardless: a null dereference).
TEST(Reducer, NoParametersIsNoWork) {
  auto group = std::make_shared<MirrorGroup>(2);
  Reducer r({}, group, small_caps());
  EXPECT_TRUE(r.bucket_layout().empty());
  r.prepare_for_backward();
  PhaseTimes t;
  r.finalize_backward(t);
  EXPECT_TRUE(r.rebuilt());
}

// The compression hooks: each bucket goes out as one 16-bit sum, and the result is what
// the f32 hook gives here (the gradient itself, as the average of identical copies)
// rounded once to 16 bits (x/2 rounded, then doubled exactly), so within the format's
// unit roundoff: 2^-11 for fp16, 2^-8 for bf16 (round to nearest, values kept normal).
void expect_compressed(CommHookKind kind, DType wire, double unit_roundoff) {
  ReducerOptions o = small_caps();
  o.hook = kind;
  Fixture f(o);
  std::vector<std::vector<float>> want;
  uint64_t s = 12345;
  for (size_t i = 0; i < f.ps.owned.size(); ++i) {
    Tensor& g = f.ps[i].grad;
    for (int64_t j = 0; j < g.numel(); ++j) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float mag = 0.01f + static_cast<float>((s >> 33) % 10000) / 1000.f;  // [0.01, 10.01)
      g.f32()[j] = (s >> 62) & 1 ? -mag : mag;
    }
    want.push_back(g.to_vector());
  }
  f.prepare();
  f.mark({4, 3, 2, 1, 0});
  f.finalize();
  ASSERT_EQ(f.allreduces().size(), 4u);
  for (const MirrorGroup::Op& op : f.allreduces()) {
    EXPECT_EQ(op.dtype, wire);
    EXPECT_EQ(op.reduce, ReduceOp::sum);
  }
  double worst = 0;
  for (size_t i = 0; i < f.ps.owned.size(); ++i) {
    std::vector<float> got = f.ps[i].grad.to_vector();
    for (size_t j = 0; j < got.size(); ++j) {
      const double rel = std::fabs(static_cast<double>(got[j]) - want[i][j]) / std::fabs(want[i][j]);
      ASSERT_LE(rel, unit_roundoff) << f.ps[i].name << "[" << j << "]: " << got[j] << " vs " << want[i][j];
      worst = std::max(worst, rel);
    }
  }
  EXPECT_GT(worst, 0) << "the values went through 16 bits";
}

TEST(Reducer, Fp16HookIsWithinHalfPrecisionOfF32) {
  expect_compressed(CommHookKind::fp16, DType::f16, std::ldexp(1.0, -11));
}

TEST(Reducer, Bf16HookIsWithinBfloat16PrecisionOfF32) {
  expect_compressed(CommHookKind::bf16, DType::bf16, std::ldexp(1.0, -8));
}

// PowerSGD (runtime/strategy/powersgd.h) on the mirror group: the peer holds this rank's
// gradients, so the average is the gradient itself and what comes back is its low-rank
// approximation. A rank-1 gradient survives rank-1 compression (to f32 rounding), 1-D
// gradients travel uncompressed in the same first all-reduce, and error feedback keeps
// exactly what compression left out.
struct PowerSgdFixture {
  std::vector<std::unique_ptr<Parameter>> owned;  // p0: 32 x 16 weight, p1: 32 bias
  std::shared_ptr<MirrorGroup> group;
  std::unique_ptr<Reducer> reducer;

  explicit PowerSgdFixture(int world, int64_t start_step = 0) : group(std::make_shared<MirrorGroup>(world)) {
    for (const Shape& shape : {Shape{32, 16}, Shape{32}}) {
      auto p = std::make_unique<Parameter>();
      p->name = "p" + std::to_string(owned.size());
      p->value = Tensor::zeros(shape);
      p->grad = Tensor::zeros(shape);
      owned.push_back(std::move(p));
    }
    ReducerOptions o;
    o.hook = CommHookKind::powersgd;
    o.powersgd.gate = PowerSgdGate::always;
    o.powersgd.start_step = start_step;
    reducer = std::make_unique<Reducer>(std::vector<Parameter*>{owned[0].get(), owned[1].get()}, group, o);
  }
  // One synchronised backward with these gradients; returns what the reducer left.
  std::vector<std::vector<float>> step(const std::vector<float>& weight, const std::vector<float>& bias) {
    reducer->prepare_for_backward();
    std::copy(weight.begin(), weight.end(), owned[0]->grad.f32());
    std::copy(bias.begin(), bias.end(), owned[1]->grad.f32());
    reducer->mark_ready(*owned[1]);
    reducer->mark_ready(*owned[0]);
    PhaseTimes t;
    reducer->finalize_backward(t);
    return {owned[0]->grad.to_vector(), owned[1]->grad.to_vector()};
  }
};

std::vector<float> rank_one(float scale) {  // u v^T, u_i = i + 1, v_j = (j % 5) - 2.5
  std::vector<float> g(32 * 16);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 16; ++j) g[i * 16 + j] = scale * static_cast<float>(i + 1) * (static_cast<float>(j % 5) - 2.5f);
  return g;
}

std::vector<float> bias_values() {
  std::vector<float> b(32);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return b;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double peak = 0;
  for (float w : want) peak = std::max(peak, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * peak) << "element " << i;
}

TEST(PowerSgd, ARankOneGradientComesBackAndVectorsPassExactlyInTheSameAllReduce) {
  PowerSgdFixture f(2);
  const auto out = f.step(rank_one(1.0f), bias_values());
  expect_close(out[0], rank_one(1.0f), 1e-5);
  EXPECT_EQ(out[1], bias_values());  // 2 b summed, halved: exact
  // Two sums: [bias (32) | P (32 x 1)], then [Q (16 x 1)].
  std::vector<int64_t> counts;
  for (const MirrorGroup::Op& op : f.group->ops)
    if (op.op == OpType::allreduce) {
      EXPECT_EQ(op.reduce, ReduceOp::sum);
      counts.push_back(op.count);
    }
  EXPECT_EQ(counts, (std::vector<int64_t>{64, 16}));
}

TEST(PowerSgd, StepsBeforeTheStartAreAveragedUncompressed) {
  PowerSgdFixture f(2, /*start_step=*/2);
  f.step(rank_one(1.0f), bias_values());
  f.step(rank_one(1.0f), bias_values());
  size_t before = 0;
  for (const MirrorGroup::Op& op : f.group->ops)
    if (op.op == OpType::allreduce) {
      EXPECT_EQ(op.reduce, ReduceOp::avg);
      ++before;
    }
  EXPECT_EQ(before, 1u * 2);  // one bucket, one plain all-reduce per step
  f.step(rank_one(1.0f), bias_values());
  size_t sums = 0;
  for (const MirrorGroup::Op& op : f.group->ops) sums += op.op == OpType::allreduce && op.reduce == ReduceOp::sum;
  EXPECT_EQ(sums, 2u);
  EXPECT_EQ(f.reducer->powersgd()->steps(), 3);
}

TEST(PowerSgd, ErrorFeedbackKeepsWhatCompressionLeftOut) {
  // A rank-2 gradient at rank 1: the first step sends part of it; later steps with zero
  // gradients send the rest out of the error. What was sent plus the error left is the
  // gradient, to f32 rounding.
  PowerSgdFixture f(1);
  std::vector<float> g = rank_one(1.0f);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 16; ++j) g[i * 16 + j] += static_cast<float>((i % 3) - 1) * static_cast<float>(j + 1);
  std::vector<float> sent(g.size(), 0.0f);
  const std::vector<float> zero(g.size(), 0.0f), zero_bias(32, 0.0f);
  for (int s = 0; s < 4; ++s) {
    const auto out = f.step(s == 0 ? g : zero, zero_bias);
    if (s == 0) {
      double diff = 0;
      for (size_t i = 0; i < g.size(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(out[0][i] - g[i])));
      EXPECT_GT(diff, 1.0) << "a rank-2 gradient cannot pass rank-1 compression whole";
    }
    for (size_t i = 0; i < g.size(); ++i) sent[i] += out[0][i];
  }
  const TensorFile state = f.reducer->powersgd()->checkpoint_state(*f.group, std::chrono::seconds(5));
  const Tensor* error = nullptr;
  for (const auto& [name, t] : state.tensors)
    if (name == "powersgd.error.rank0.p0") error = &t;
  ASSERT_NE(error, nullptr);
  std::vector<float> total = sent;
  for (size_t i = 0; i < g.size(); ++i) total[i] += error->f32()[i];
  expect_close(total, g, 1e-5);
  // Rank 2 spread over two steps: after the second, (almost) nothing is left behind.
  double left = 0;
  for (size_t i = 0; i < g.size(); ++i) left = std::max(left, std::fabs(static_cast<double>(error->f32()[i])));
  EXPECT_LT(left, 1e-3);
}

TEST(PowerSgd, AResumedStateContinuesBitForBit) {
  PowerSgdFixture a(1), b(1);
  std::vector<float> g = rank_one(0.5f);
  for (size_t i = 0; i < g.size(); ++i) g[i] += static_cast<float>(i % 7) * 0.01f;
  for (int s = 0; s < 3; ++s) a.step(g, bias_values());
  // b's own state differs (zero gradients: P all zero, which the epsilon keeps from NaN)...
  for (int s = 0; s < 3; ++s) {
    const auto out = b.step(std::vector<float>(g.size(), 0.0f), std::vector<float>(32, 0.0f));
    for (float v : out[0]) ASSERT_EQ(v, 0.0f);
  }
  // ... until it takes a's.
  const TensorFile state = a.reducer->powersgd()->checkpoint_state(*a.group, std::chrono::seconds(5));
  const std::string path = testing::TempDir() + "powersgd_state.safetensors";
  const SafetensorsChecksums sums = write_safetensors(path, state.tensors, state.metadata);
  b.reducer->powersgd()->restore(path, sums.file_crc32, 1, 0);
  EXPECT_EQ(b.reducer->powersgd()->steps(), 3);
  const auto next_a = a.step(rank_one(1.0f), bias_values());
  const auto next_b = b.step(rank_one(1.0f), bias_values());
  EXPECT_EQ(next_a, next_b);
  // Another rank than the checkpoint's is refused, naming both.
  PowerSgdFixture c(1);
  ReducerOptions o;
  o.hook = CommHookKind::powersgd;
  o.powersgd.rank = 2;
  Reducer r2({c.owned[0].get(), c.owned[1].get()}, c.group, o);
  try {
    r2.powersgd()->restore(path, sums.file_crc32, 1, 0);
    FAIL() << "restored rank-1 state into rank 2";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("--powersgd-rank 1, this run uses 2"), std::string::npos) << e.what();
  }
  // A file that changed since it was verified is refused.
  EXPECT_THROW(b.reducer->powersgd()->restore(path, sums.file_crc32 ^ 1u, 1, 0), CheckpointError);
}

TEST(PowerSgd, OrthonormalisationLeavesAZeroColumnZero) {
  // 4 x 3: column 1 all zero (PyTorch's epsilon 0 would divide 0 by 0 there).
  std::vector<float> p = {1, 0, 2, 2, 0, 1, 0, 0, -1, 1, 0, 3};
  orthonormalize_columns(p.data(), 4, 3, 1e-8f);
  for (float v : p) ASSERT_FALSE(std::isnan(v));
  double n0 = 0, n2 = 0, d02 = 0;
  for (int row = 0; row < 4; ++row) {
    EXPECT_EQ(p[row * 3 + 1], 0.0f);
    n0 += p[row * 3] * p[row * 3];
    n2 += p[row * 3 + 2] * p[row * 3 + 2];
    d02 += p[row * 3] * p[row * 3 + 2];
  }
  EXPECT_NEAR(n0, 1.0, 1e-6);
  EXPECT_NEAR(n2, 1.0, 1e-6);
  EXPECT_NEAR(d02, 0.0, 1e-6);
}

TEST(PowerSgd, IsRefusedWithZeroAndWithAutoBuckets) {
  Params ps = five_params();
  auto group = std::make_shared<MirrorGroup>(2);
  ReducerOptions o;
  o.hook = CommHookKind::powersgd;
  o.zero_stage = 1;
  EXPECT_THROW(Reducer(ps.pointers(), group, o), std::invalid_argument);
  o.zero_stage = 0;
  o.auto_buckets_after = 3;
  EXPECT_THROW(Reducer(ps.pointers(), group, o), std::invalid_argument);
}

}  // namespace
