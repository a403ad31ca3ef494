// PrefetchingSource (runtime/data/prefetch.h): the same batches, in the same order and at
// the same positions, as the source it wraps, across epochs and seeks; a failure reaches
// the consumer at the batch that failed; destruction joins the thread on every path. Also
// run under ThreadSanitizer (scripts/test --sanitize thread).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/prefetch.h"
#include "runtime/data/sampler.h"

namespace tandem {
namespace {

std::unique_ptr<DataLoader> loader(const std::shared_ptr<const Dataset>& ds, int64_t batch) {
  return std::make_unique<DataLoader>(ds, DistributedSampler(ds->size, {.seed = 5}), batch, /*drop_last=*/true);
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step_in_epoch, b.step_in_epoch);
  ASSERT_EQ(a.inputs.nbytes(), b.inputs.nbytes());
  EXPECT_EQ(std::memcmp(a.inputs.raw(), b.inputs.raw(), a.inputs.nbytes()), 0);
  ASSERT_EQ(a.labels.nbytes(), b.labels.nbytes());
  EXPECT_EQ(std::memcmp(a.labels.raw(), b.labels.raw(), a.labels.nbytes()), 0);
}

TEST(Prefetch, SameBatchesAndPositionsAsThePlainLoader) {
  auto ds = std::make_shared<const Dataset>(make_synthetic(70, 3, true));
  for (int64_t depth : {1, 3}) {
    std::unique_ptr<DataLoader> plain = loader(ds, 8);
    PrefetchingSource ahead(loader(ds, 8), {.depth = depth});
    EXPECT_EQ(ahead.steps_per_epoch(), plain->steps_per_epoch());
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      plain->set_epoch(epoch);
      ahead.set_epoch(epoch);
      for (;;) {
        std::optional<Batch> a = plain->next(), b = ahead.next();
        ASSERT_EQ(a.has_value(), b.has_value());
        EXPECT_EQ(ahead.position(), plain->position());  // the consumer's, not the thread's
        if (!a) break;
        expect_same(*a, *b);
      }
    }
    // A seek mid-epoch drops what was assembled ahead.
    ASSERT_TRUE(ahead.next() == std::nullopt);
    plain->seek({1, 2});
    ahead.seek({1, 2});
    ASSERT_TRUE(ahead.next().has_value());
    ahead.seek({0, 5});
    plain->seek({0, 5});
    EXPECT_EQ(ahead.position(), plain->position());
    expect_same(*plain->next(), *ahead.next());
    EXPECT_THROW(ahead.seek({0, 99}), std::out_of_range);
  }
}

// Batch `fail_at` throws, as a bad data file would; a slow batch leaves the thread busy.
class FailingSource final : public BatchSource {
 public:
  FailingSource(int64_t fail_at, std::chrono::milliseconds per_batch) : fail_at_(fail_at), per_batch_(per_batch) {}
  int64_t batch_size() const override { return 1; }
  int64_t replicas() const override { return 1; }
  int64_t steps_per_epoch() const override { return 10; }
  void seek(LoaderPosition p) override { position_ = p; }
  LoaderPosition position() const override { return position_; }
  std::optional<Batch> next() override {
    std::this_thread::sleep_for(per_batch_);
    if (position_.step_in_epoch == steps_per_epoch()) return std::nullopt;
    if (position_.step_in_epoch == fail_at_) throw std::runtime_error("bad sample in batch " + std::to_string(fail_at_));
    Batch b;
    b.indices = {position_.step_in_epoch};
    b.step_in_epoch = position_.step_in_epoch++;
    return b;
  }

 private:
  int64_t fail_at_;
  std::chrono::milliseconds per_batch_;
  LoaderPosition position_;
};

TEST(Prefetch, AFailureReachesTheConsumerAtItsBatch) {
  PrefetchingSource ahead(std::make_unique<FailingSource>(2, std::chrono::milliseconds(0)), {.depth = 4});
  EXPECT_EQ(ahead.next()->indices, std::vector<int64_t>{0});
  EXPECT_EQ(ahead.next()->indices, std::vector<int64_t>{1});
  for (int i = 0; i < 2; ++i) {  // asking again fails again
    try {
      ahead.next();
      FAIL() << "batch 2 should have failed";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "bad sample in batch 2");
    }
  }
  EXPECT_EQ(ahead.position(), (LoaderPosition{0, 2}));
  ahead.seek({0, 3});  // a seek past it clears the failure
  EXPECT_EQ(ahead.next()->indices, std::vector<int64_t>{3});
}

TEST(Prefetch, DestructionJoinsOnEveryPath) {
  // Failure never asked for; thread busy in a slow batch; a full queue; right after a seek.
  { PrefetchingSource a(std::make_unique<FailingSource>(0, std::chrono::milliseconds(0)), {}); }
  { PrefetchingSource a(std::make_unique<FailingSource>(-1, std::chrono::milliseconds(30)), {}); }
  {
    PrefetchingSource a(std::make_unique<FailingSource>(-1, std::chrono::milliseconds(0)), {.depth = 2});
    a.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    PrefetchingSource a(std::make_unique<FailingSource>(-1, std::chrono::milliseconds(1)), {});
    a.seek({0, 9});
  }
  EXPECT_THROW(PrefetchingSource(nullptr, {}), std::invalid_argument);
  EXPECT_THROW(PrefetchingSource(std::make_unique<FailingSource>(-1, std::chrono::milliseconds(0)), {.depth = 0}),
               std::invalid_argument);
}

}  // namespace
}  // namespace tandem
