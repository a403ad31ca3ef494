// Phase timing: laps are marked during a step and read only when the step's times are
// resolved, so a GPU step never waits for the device to time itself. On the CPU the
// marks are the host clock; these tests check the bookkeeping, not durations.
#include <gtest/gtest.h>

#include "runtime/kernels.h"
#include "runtime/strategy/strategy.h"
#include "runtime/timer.h"

#include <vector>

using namespace tandem;

TEST(Stopwatch, LapsWaitForResolveAndLandInTheirFields) {
  PhaseTimes times;
  Stopwatch sw(kernels_for(Device::cpu()));
  sw.lap(times, &PhaseTimes::forward_ms);
  sw.lap(times, &PhaseTimes::backward_ms);
  sw.lap(times, &PhaseTimes::backward_ms);
  EXPECT_EQ(times.pending.size(), 3u);
  EXPECT_EQ(times.forward_ms, 0.0);
  EXPECT_EQ(times.backward_ms, 0.0);
  times.resolve();
  EXPECT_TRUE(times.pending.empty());
  EXPECT_GE(times.forward_ms, 0.0);
  EXPECT_GE(times.backward_ms, 0.0);
  EXPECT_EQ(times.optimizer_ms, 0.0);
  EXPECT_EQ(times.comm_ms, 0.0);
  const double before = times.forward_ms + times.backward_ms;
  times.resolve();  // nothing left to add
  EXPECT_EQ(times.forward_ms + times.backward_ms, before);
}

TEST(Stopwatch, SumOfAddedTimesKeepsPendingLapsAndDividesOnlyValues) {
  Kernels& k = kernels_for(Device::cpu());
  PhaseTimes a, b;
  a.forward_ms = 2;
  b.forward_ms = 4;
  auto from = k.mark();
  auto to = k.mark();  // after `from` (not both in one call: argument order is unspecified)
  b.defer(k, from, to, &PhaseTimes::optimizer_ms);
  a += b;
  EXPECT_EQ(a.forward_ms, 6.0);
  ASSERT_EQ(a.pending.size(), 1u);
  const PhaseTimes half = a.divided_by(2);
  EXPECT_EQ(half.forward_ms, 3.0);
  EXPECT_TRUE(half.pending.empty());
  a.resolve();
  EXPECT_GE(a.optimizer_ms, 0.0);
  EXPECT_TRUE(a.pending.empty());
}

TEST(Stopwatch, LapMsReadsAtOnce) {
  Stopwatch sw(kernels_for(Device::cpu()));
  EXPECT_GE(sw.lap_ms(), 0.0);
}

TEST(StepOutput, AveragesTheMicroBatchesMeansWhenRead) {
  Kernels& k = kernels_for(Device::cpu());
  const std::vector<float> a = {1, 2, 3}, b = {4, 8};
  StepOutput out;
  out.add(k.sum_later(a.data(), 3), 3);  // mean 2
  out.add(k.sum_later(b.data(), 2), 2);  // mean 6
  EXPECT_EQ(out.loss(), 4.0);
  EXPECT_EQ(StepOutput(1.5).loss(), 1.5);
  EXPECT_EQ(StepOutput().loss(), 0.0);
}
