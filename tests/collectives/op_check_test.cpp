// Single-process tests of the cross-rank op check (collectives/op_check.h): the
// message that names what every rank passed, what is and is not compared, and its
// wiring into the CPU backends' comm thread through a fake two-rank group whose
// "peer" fingerprint the test chooses. The real engines are in worker.cpp's
// --scenario mismatch.
#include <atomic>

#include <gtest/gtest.h>

#include "collectives/op_check.h"
#include "collectives/threaded_process_group.h"

namespace tandem {
namespace {

using std::chrono::seconds;

Collective allreduce_of(float* data, int64_t count, uint64_t seq) {
  Collective c;
  c.op = OpType::allreduce;
  c.seq = seq;
  c.in_place = true;
  c.in = c.out = cpu_buffer(data, count);
  return c;
}

TEST(OpCheck, AgreeingRanksPass) {
  float x[1000];
  const Collective c = allreduce_of(x, 1000, 5);
  const OpFingerprint f = fingerprint_of(c);
  EXPECT_EQ(disagreement(c, {f, f, f}), "");
}

TEST(OpCheck, MessageNamesWhatEveryRankPassed) {
  float x[1000];
  const Collective c = allreduce_of(x, 1000, 5);
  const OpFingerprint other = fingerprint_of(allreduce_of(x, 999, 5));
  EXPECT_EQ(disagreement(c, {fingerprint_of(c), other}),
            "allreduce #5 (f32 sum, 4000 bytes, in place): ranks disagree: rank 0: allreduce f32 sum 1000 "
            "elements; rank 1: allreduce f32 sum 999 elements");
}

TEST(OpCheck, RanksThatAgreeAreListedTogether) {
  float x[8];
  const Collective c = allreduce_of(x, 8, 1);
  const OpFingerprint same = fingerprint_of(c);
  Collective b = c;
  b.op = OpType::broadcast;
  b.root = 2;
  const OpFingerprint odd = fingerprint_of(b);
  EXPECT_EQ(disagreement(c, {same, same, same, odd, same, odd}),
            "allreduce #1 (f32 sum, 32 bytes, in place): ranks disagree: ranks 0-2, 4: allreduce f32 sum 8 "
            "elements; ranks 3, 5: broadcast f32 8 elements from root 2");
}

TEST(OpCheck, ComparesWhatMustMatchOnly) {
  float x[16], y[16];
  int32_t i[16];
  // In place on one rank and out of place on another is allowed, as in c10d.
  Collective out_of_place = allreduce_of(x, 16, 3);
  out_of_place.in = cpu_buffer(y, 16);
  out_of_place.in_place = false;
  EXPECT_EQ(disagreement(out_of_place, {fingerprint_of(allreduce_of(x, 16, 3)), fingerprint_of(out_of_place)}), "");
  // A barrier has no buffers: whatever its Collective carries is not compared.
  Collective barrier;
  barrier.op = OpType::barrier;
  barrier.seq = 3;
  Collective barrier_with_junk = barrier;
  barrier_with_junk.in = barrier_with_junk.out = cpu_buffer(i, 16);
  EXPECT_EQ(disagreement(barrier, {fingerprint_of(barrier), fingerprint_of(barrier_with_junk)}), "");
  // The same bytes in another dtype, another reduce op, another root: all differ.
  Collective as_i32 = allreduce_of(x, 16, 3);
  as_i32.in = as_i32.out = cpu_buffer(i, 16);
  EXPECT_NE(disagreement(as_i32, {fingerprint_of(allreduce_of(x, 16, 3)), fingerprint_of(as_i32)}), "");
  Collective as_max = allreduce_of(x, 16, 3);
  as_max.reduce = ReduceOp::max;
  EXPECT_NE(disagreement(as_max, {fingerprint_of(allreduce_of(x, 16, 3)), fingerprint_of(as_max)}), "");
  Collective bcast0 = allreduce_of(x, 16, 3), bcast1;
  bcast0.op = OpType::broadcast;
  bcast1 = bcast0;
  bcast1.root = 1;
  EXPECT_NE(disagreement(bcast0, {fingerprint_of(bcast0), fingerprint_of(bcast1)}), "");
}

TEST(OpCheck, AnotherSeqIsNamed) {
  float x[4];
  const Collective c = allreduce_of(x, 4, 6);
  EXPECT_EQ(disagreement(c, {fingerprint_of(c), fingerprint_of(allreduce_of(x, 4, 7))}),
            "allreduce #6 (f32 sum, 16 bytes, in place): ranks disagree: rank 0: allreduce f32 sum 4 elements; "
            "rank 1: allreduce f32 sum 4 elements as #7");
}

// Rank 0 of a two-rank group without an engine: "rank 1" passes what `peer` makes of
// rank 0's fingerprint, and the engine call only counts.
class CheckedFakeGroup : public ThreadedProcessGroup {
 public:
  using Peer = std::function<OpFingerprint(OpFingerprint)>;
  explicit CheckedFakeGroup(Peer peer) : ThreadedProcessGroup(Setup{"fake", 0, 2, seconds(5), nullptr, nullptr}) {
    check_ops_with([this, peer](const OpFingerprint& mine, OpFingerprint* all, uint64_t) {
      ++gathers;
      all[0] = mine;
      all[1] = peer(mine);
    });
  }
  ~CheckedFakeGroup() override { stop_comm_thread(); }

  std::atomic<int> gathers{0};
  std::atomic<int> engine_calls{0};

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override {
    return submit(c, [this] { ++engine_calls; });
  }
};

TEST(OpCheck, EveryOpIsCheckedBeforeTheEngineEvenWithoutBytes) {
  auto g = std::make_shared<CheckedFakeGroup>([](OpFingerprint f) { return f; });
  float x[4] = {};
  g->allreduce(cpu_buffer(x, 4))->wait(seconds(10));
  g->allreduce(cpu_buffer(x, 0))->wait(seconds(10));
  EXPECT_EQ(g->gathers, 2);
  EXPECT_EQ(g->engine_calls, 1);  // the zero-byte op moves nothing
}

TEST(OpCheck, ZeroAgainstSevenFailsTheOpAndBreaksTheGroup) {
  auto g = std::make_shared<CheckedFakeGroup>([](OpFingerprint f) {
    f.in_count = f.out_count = 7;
    return f;
  });
  float x[4] = {};
  auto w = g->allreduce(cpu_buffer(x, 0));
  try {
    w->wait(seconds(10));
    FAIL() << "a mismatched op succeeded";
  } catch (const CollectiveTimeout& e) {
    FAIL() << "a mismatch reported as a timeout: " << e.what();
  } catch (const CollectiveError& e) {
    EXPECT_STREQ(e.what(),
                 "allreduce #1 (f32 sum, 0 bytes, in place): ranks disagree: rank 0: allreduce f32 sum 0 elements; "
                 "rank 1: allreduce f32 sum 7 elements");
  }
  try {
    g->allreduce(cpu_buffer(x, 4))->wait(seconds(10));
    FAIL() << "an op after a mismatch succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #2 (f32 sum, 16 bytes, in place) was not run: the process group "
                                         "is broken (allreduce #1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(g->engine_calls, 0);
}

}  // namespace
}  // namespace tandem
