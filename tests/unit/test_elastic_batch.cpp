// The batch and learning rate across a change of world size (models/elastic_batch.h):
// exact values for each policy, and the refusals.
#include <gtest/gtest.h>

#include <stdexcept>

#include "models/elastic_batch.h"

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

TEST(ElasticBatch, GlobalKeepsTheGlobalBatchThroughThePerRankBatch) {
  const auto p = plan_elastic_batch(ElasticBatch::global, written_at(3, 16), 16, 1, 0.1, 4);
  EXPECT_EQ(p.batch_size, 12);
  EXPECT_EQ(p.grad_accum, 1);
  EXPECT_DOUBLE_EQ(p.lr, 0.1);
  EXPECT_EQ(p.base_world, 3);
  EXPECT_NE(p.note.find("world size 3 -> 4: per-rank batch 16 -> 12"), std::string::npos);
}

TEST(ElasticBatch, GlobalFallsBackToAccumulation) {
  // 2 x 16 = 32 over 4 ranks with --grad-accum 3: 32 / 12 is not whole, 32 / (4 x 8) is.
  const auto p = plan_elastic_batch(ElasticBatch::global, written_at(2, 16), 8, 3, 0.1, 4);
  EXPECT_EQ(p.batch_size, 8);
  EXPECT_EQ(p.grad_accum, 1);
}

TEST(ElasticBatch, GlobalRefusesWhatDoesNotDivide) {
  try {
    plan_elastic_batch(ElasticBatch::global, written_at(2, 16), 16, 1, 0.1, 3);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("global batch 32 is not a whole number of per-rank batches at world size 3"),
              std::string::npos);
  }
}

TEST(ElasticBatch, PerRankScalesTheRateFromTheFirstWorldNotTheLast) {
  // First run at 4, checkpoint at 2 (base 4 carried), now 6: lr x 6/4.
  const auto p = plan_elastic_batch(ElasticBatch::per_rank, written_at(2, 16, 1, 4), 16, 1, 0.2, 6);
  EXPECT_EQ(p.batch_size, 16);
  EXPECT_DOUBLE_EQ(p.lr, 0.2 * 6 / 4);
  EXPECT_EQ(p.base_world, 4);
}

TEST(ElasticBatch, SameWorldOrOffChangesNothing) {
  for (auto policy : {ElasticBatch::global, ElasticBatch::per_rank, ElasticBatch::off}) {
    const auto same = plan_elastic_batch(policy, written_at(4, 16), 32, 2, 0.1, 4);
    EXPECT_EQ(same.batch_size, 32);
    EXPECT_EQ(same.grad_accum, 2);
    EXPECT_DOUBLE_EQ(same.lr, 0.1);
    EXPECT_TRUE(same.note.empty());
  }
  const auto off = plan_elastic_batch(ElasticBatch::off, written_at(3, 16), 16, 1, 0.1, 4);
  EXPECT_EQ(off.batch_size, 16);
  EXPECT_TRUE(off.note.empty());
}

TEST(ElasticBatch, ABadBaseWorldIsNamed) {
  CheckpointMeta m = written_at(2, 16);
  m.extra[kBaseWorldKey] = "many";
  EXPECT_THROW(plan_elastic_batch(ElasticBatch::per_rank, m, 16, 1, 0.1, 4), std::runtime_error);
}

}  // namespace
}  // namespace tandem
