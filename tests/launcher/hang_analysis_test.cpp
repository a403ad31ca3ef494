// tandemrun's hang analysis (launcher/hang_analysis.h) from exact heartbeats and dumps.
#include <gtest/gtest.h>

#include "launcher/hang_analysis.h"

namespace tandem::launcher {
namespace {

using std::chrono::milliseconds;

PeerHealth peer(int rank, uint64_t entered, uint64_t completed, int64_t step, milliseconds age = milliseconds(200)) {
  PeerHealth p;
  p.rank = rank;
  p.known = true;
  p.node = 0;
  p.pid = 100 + rank;
  p.host = "h";
  p.entered = entered;
  p.completed = completed;
  p.step = step;
  p.age = age;
  return p;
}

std::string dump(int rank, uint64_t seq, const std::string& state, int64_t bytes, int64_t started_us) {
  return R"({"format":"tandem-flight-recorder","version":1,"rank":)" + std::to_string(rank) +
         R"(,"entries":[{"seq":)" + std::to_string(seq - 1) +
         R"(,"op":"allreduce","dtype":"f32","bytes":4096,"state":"completed","started_unix_us":1},)" +
         R"({"seq":)" + std::to_string(seq) + R"(,"op":"allreduce","dtype":"f32","bytes":)" + std::to_string(bytes) +
         R"(,"state":")" + state + R"(","started_unix_us":)" + std::to_string(started_us) + "}]}";
}

HangInput base() {
  HangInput in;
  in.stale_after = milliseconds(3000);
  in.no_progress_for = milliseconds(12100);
  in.hang_timeout = milliseconds(10000);
  in.now_unix_us = 100'000'000;
  return in;
}

TEST(HangAnalysis, FrozenRankInsideTheOp) {
  HangInput in = base();
  in.peers = {peer(0, 703, 702, 40), peer(1, 703, 702, 40, milliseconds(11900)), peer(2, 703, 702, 40),
              peer(3, 703, 702, 40)};
  in.dumps = {{0, dump(0, 703, "running", 4096, 88'000'000)},
              {2, dump(2, 703, "running", 4096, 88'000'000)},
              {3, dump(3, 703, "running", 4096, 88'000'000)}};
  EXPECT_EQ(analyse_hang(in),
            "no rank completed a training step for 12.1 s (--hang-timeout-s 10): rank 1 stuck in allreduce #703 for "
            "12.1 s (no heartbeat for 11.9 s: stopped or frozen); ranks 0, 2, 3 wait in allreduce #703 for 12.0 s; "
            "first divergence: none (flight recorders of ranks 0, 2, 3)");
}

TEST(HangAnalysis, RankThatStoppedSteppingOutsideCollectives) {
  HangInput in = base();
  in.peers = {peer(0, 51, 50, 25), peer(1, 50, 50, 25)};
  EXPECT_EQ(analyse_hang(in),
            "no rank completed a training step for 12.1 s (--hang-timeout-s 10): rank 1 is alive but not in a "
            "collective: it stopped after step 25 and op #50 while others entered op #51; rank 0 wait in op #51 for "
            "12.1 s; first divergence: none (no flight recorder came back)");
}

TEST(HangAnalysis, FirstDivergenceNamesWhatEachRankRecorded) {
  std::map<int, std::string> dumps = {{0, dump(0, 5, "running", 4000, 1)}, {1, dump(1, 5, "running", 3996, 1)}};
  EXPECT_EQ(first_divergence(dumps), "#5 (rank 0: allreduce f32 4000 B; rank 1: allreduce f32 3996 B)");
  dumps[1] = "not json";
  EXPECT_EQ(first_divergence(dumps), "none");
}

TEST(HangAnalysis, DamagedEntriesAreLeftOut) {
  // An op count beyond every integer (parsed as a float), a float seq, a string size: those
  // entries are left out, and the rest of the dump still counts.
  const std::string damaged =
      R"({"entries":[{"seq":1e300,"op":"allreduce"},{"seq":5,"op":"allreduce","dtype":"f32","bytes":"4000",)"
      R"("started_unix_us":1e300,"state":"running"},{"seq":-1,"op":"broadcast"}]})";
  std::map<int, std::string> dumps = {{0, dump(0, 5, "running", 4000, 1)}, {1, damaged}};
  EXPECT_EQ(first_divergence(dumps), "#5 (rank 0: allreduce f32 4000 B; rank 1: allreduce f32 0 B)");
}

TEST(HangAnalysis, SilentAndIdleRanks) {
  HangInput in = base();
  PeerHealth silent;
  silent.rank = 2;
  in.peers = {peer(0, 9, 9, 3), peer(1, 9, 9, 3), silent};
  EXPECT_EQ(analyse_hang(in),
            "no rank completed a training step for 12.1 s (--hang-timeout-s 10): ranks 0, 1 are alive and outside "
            "any collective (busy, or waiting on something else); rank 2 published no heartbeat; first divergence: "
            "none (no flight recorder came back)");
}

}  // namespace
}  // namespace tandem::launcher
