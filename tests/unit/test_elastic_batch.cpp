// The batch and learning rate across a change of world size (train/elastic_batch.h):
// exact values for each policy, and the refusals.
#include <gtest/gtest.h>

#include <stdexcept>

#include "train/elastic_batch.h"

namespace tandem {
namespace {

CheckpointMeta written_at(int64_t replicas, int64_t batch, int64_t accum = 1, int64_t base = 0) {
  CheckpointMeta m;
  m.replicas = replicas;
  m.batch_size = batch;
  m.grad_accum = accum;
  if (base > 0) m.extra[kBaseWorldKey] = std::to_string(base);
  return m;
}

BatchSettings flags(int64_t batch, int64_t accum = 1, float lr = 0.1f, float min_lr = 0) {
  return {batch, accum, lr, min_lr};
}

// The rule as docs/elastic.md writes it: rate x world / base in double, rounded to float once.
float scaled(float rate, int64_t world, int64_t base) {
  return static_cast<float>(static_cast<double>(rate) * static_cast<double>(world) / static_cast<double>(base));
}

std::string refusal_of(const CheckpointMeta& m, const BatchSettings& f, int64_t world) {
  try {
    plan_elastic_batch(ElasticBatch::global, m, f, world);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ElasticBatch, GlobalKeepsTheGlobalBatchThroughThePerRankBatch) {
  const auto p = plan_elastic_batch(ElasticBatch::global, written_at(3, 16), flags(16), 4);
  EXPECT_EQ(p.settings.batch_size, 12);
  EXPECT_EQ(p.settings.grad_accum, 1);
  EXPECT_EQ(p.settings.lr, 0.1f);
  EXPECT_EQ(p.base_world, 3);
  EXPECT_NE(p.note.find("world size 3 -> 4: per-rank batch 16 -> 12"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("global batch 48 kept"), std::string::npos) << p.note;
}

TEST(ElasticBatch, GlobalFallsBackToAccumulation) {
  // 2 x 16 = 32 over 4 ranks with --grad-accum 3: 32 / 12 is not whole, 32 / (4 x 8) is.
  const auto p = plan_elastic_batch(ElasticBatch::global, written_at(2, 16), flags(8, 3), 4);
  EXPECT_EQ(p.settings.batch_size, 8);
  EXPECT_EQ(p.settings.grad_accum, 1);
  // 6 x 16 = 96 over 4 ranks with --grad-accum 5 and --batch-size 12: 96 / 20 is not whole,
  // 96 / (4 x 12) = 2 micro-batches.
  const auto q = plan_elastic_batch(ElasticBatch::global, written_at(6, 16), flags(12, 5), 4);
  EXPECT_EQ(q.settings.batch_size, 12);
  EXPECT_EQ(q.settings.grad_accum, 2);
}

TEST(ElasticBatch, GlobalKeepsTheCheckpointsBatchAtItsOwnWorldSize) {
  // A job of --batch-size 16 at 3 ranks (48) went to 4 ranks of 12; resumed at 4 again (a
  // restart after a failure), the flags' 16 would make 64: the checkpoint's 48 is kept.
  const auto p = plan_elastic_batch(ElasticBatch::global, written_at(4, 12), flags(16), 4);
  EXPECT_EQ(p.settings.batch_size, 12);
  EXPECT_NE(p.note.find("world size 4 -> 4: per-rank batch 16 -> 12"), std::string::npos) << p.note;
  // The flags already make the checkpoint's global batch: nothing to say.
  const auto same = plan_elastic_batch(ElasticBatch::global, written_at(4, 16, 2), flags(16, 2), 4);
  EXPECT_EQ(same.settings.batch_size, 16);
  EXPECT_EQ(same.settings.grad_accum, 2);
  EXPECT_TRUE(same.note.empty()) << same.note;
}

TEST(ElasticBatch, GlobalRefusesWhatDoesNotDivideNamingTheNumbers) {
  const std::string not_multiple = refusal_of(written_at(4, 16), flags(16), 3);
  EXPECT_NE(not_multiple.find("world size 4 -> 3: the checkpoint's global batch 64 is not a whole number of per-rank "
                              "batches at world size 3 (64 is not a multiple of 3"),
            std::string::npos)
      << not_multiple;
  EXPECT_NE(not_multiple.find("the nearest: 2 and 4"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("--elastic-batch per-rank"), std::string::npos) << not_multiple;
  // 48 over 3 is 16 a rank, but neither --grad-accum 5 nor --batch-size 5 fits it.
  const std::string no_flag = refusal_of(written_at(2, 24), flags(5, 5), 3);
  EXPECT_NE(no_flag.find("Pass a --grad-accum that divides 16"), std::string::npos) << no_flag;
}

TEST(ElasticBatch, PerRankScalesTheRateFromTheFirstWorldNotTheLast) {
  // First run at 4, checkpoint at 2 (base 4 carried), now 6: lr x 6/4, --min-lr with it.
  const auto p = plan_elastic_batch(ElasticBatch::per_rank, written_at(2, 16, 1, 4), flags(16, 1, 0.2f, 0.02f), 6);
  EXPECT_EQ(p.settings.batch_size, 16);
  EXPECT_EQ(p.settings.lr, scaled(0.2f, 6, 4));
  EXPECT_EQ(p.settings.lr, 0.3f);
  EXPECT_EQ(p.settings.min_lr, scaled(0.02f, 6, 4));
  EXPECT_EQ(p.base_world, 4);
  EXPECT_NE(p.note.find("world size 2 -> 6: per-rank batch 16 kept, global batch 96, learning rate 0.2 x 6/4 = 0.3, "
                        "--min-lr 0.02 -> 0.03 (the job first ran at world size 4"),
            std::string::npos)
      << p.note;
}

TEST(ElasticBatch, PerRankKeepsTheScaleAtTheCheckpointsOwnWorldSize) {
  // Base 4, checkpoint at 2, resumed at 2 again: still x 2/4, not the flags' rate.
  const auto p = plan_elastic_batch(ElasticBatch::per_rank, written_at(2, 16, 1, 4), flags(16, 1, 0.2f), 2);
  EXPECT_EQ(p.settings.lr, scaled(0.2f, 2, 4));
  EXPECT_EQ(p.settings.lr, 0.1f);
  // Back at the base: the flags' rate.
  const auto back = plan_elastic_batch(ElasticBatch::per_rank, written_at(2, 16, 1, 4), flags(16, 1, 0.2f), 4);
  EXPECT_EQ(back.settings.lr, 0.2f);
}

TEST(ElasticBatch, UnchangedOrOffChangesNothing) {
  for (auto policy : {ElasticBatch::global, ElasticBatch::per_rank, ElasticBatch::off}) {
    const auto same = plan_elastic_batch(policy, written_at(4, 16, 2), flags(16, 2), 4);
    EXPECT_EQ(same.settings.batch_size, 16);
    EXPECT_EQ(same.settings.grad_accum, 2);
    EXPECT_EQ(same.settings.lr, 0.1f);
    EXPECT_TRUE(same.note.empty());
  }
  const auto off = plan_elastic_batch(ElasticBatch::off, written_at(3, 16, 1, 3), flags(16), 4);
  EXPECT_EQ(off.settings.batch_size, 16);
  EXPECT_EQ(off.settings.lr, 0.1f);
  EXPECT_EQ(off.base_world, 3);  // carried on, whatever the policy
  EXPECT_TRUE(off.note.empty());
}

TEST(ElasticBatch, ABadBaseWorldIsNamed) {
  for (const char* bad : {"many", "0", "4x"}) {
    CheckpointMeta m = written_at(2, 16);
    m.extra[kBaseWorldKey] = bad;
    EXPECT_THROW(plan_elastic_batch(ElasticBatch::per_rank, m, flags(16), 4), std::runtime_error) << bad;
  }
}

}  // namespace
}  // namespace tandem
