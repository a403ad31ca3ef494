// RankHealth's verdicts from constructed heartbeats (exact messages), its wire format,
// and a real heartbeat through a real store; FlightRecorder's ring and dump.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "collectives/flight_recorder.h"
#include "collectives/health.h"
#include "collectives/store.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kStale{3000};

PeerHealth peer(int rank, int node, uint64_t entered, uint64_t completed, milliseconds age = milliseconds(100)) {
  PeerHealth p;
  p.rank = rank;
  p.known = true;
  p.node = node;
  p.pid = 1000 + rank;
  p.host = std::to_string(node);
  p.host.insert(p.host.begin(), 'h');  // not "h" + ...: GCC 12 warns falsely of it (-Wrestrict) once inlined
  p.entered = entered;
  p.completed = completed;
  p.age = age;
  return p;
}

RankHealth::Report report(std::vector<PeerHealth> peers) {
  RankHealth::Report r;
  r.known = true;
  r.peers = std::move(peers);
  return r;
}

TEST(RankHealth, RankList) {
  EXPECT_EQ(rank_list({0}), "0");
  EXPECT_EQ(rank_list({0, 2, 3}), "0, 2, 3");
  EXPECT_EQ(rank_list({0, 2, 3, 4, 7}), "0, 2-4, 7");
}

TEST(RankHealth, FrozenInsideTheOpIsNamedAndTheOthersWait) {
  auto r = report({peer(0, 0, 703, 702), peer(1, 0, 703, 702, milliseconds(9800)), peer(2, 0, 703, 702),
                   peer(3, 0, 703, 702)});
  EXPECT_EQ(RankHealth::explain(r, 703, "gloo", kStale),
            "rank 1 (node 0, pid 1001) entered it and then stopped responding (no heartbeat for 9.8 s); "
            "ranks 0, 2, 3 are waiting in it");
}

TEST(RankHealth, FrozenBeforeTheOpAndNotReached) {
  auto r = report({peer(0, 0, 5, 4), peer(1, 0, 4, 4, milliseconds(4000)), peer(2, 1, 3, 3)});
  EXPECT_EQ(RankHealth::explain(r, 5, "shm", kStale),
            "rank 1 (node 0, pid 1001) stopped responding before reaching it (no heartbeat for 4.0 s; its last "
            "collective is #4); rank 2 (node 1, pid 1002) has not reached it (its last collective is #3); "
            "rank 0 is waiting in it");
}

TEST(RankHealth, GoneUnreachableAndUnknown) {
  PeerHealth gone = peer(1, 0, 5, 4);
  gone.gone = true;
  PeerHealth cut2 = peer(2, 1, 5, 4, milliseconds(7000));
  cut2.node_age = milliseconds(7200);
  PeerHealth cut3 = peer(3, 1, 5, 4, milliseconds(7100));
  cut3.node_age = milliseconds(7200);
  PeerHealth silent;
  silent.rank = 4;
  auto r = report({peer(0, 0, 5, 4), gone, cut2, cut3, silent});
  EXPECT_EQ(RankHealth::explain(r, 5, "gloo", kStale),
            "rank 1 (node 0, pid 1001) is gone: its process no longer exists (its last collective is #5); "
            "rank 4 has published no heartbeat; ranks 2, 3 on node 1 are unreachable: node 1 has not been heard "
            "from for 7.2 s (its network link or its connection to the store is down); rank 0 is waiting in it");
}

TEST(RankHealth, StaleRankWithALiveLauncherIsFrozenNotUnreachable) {
  PeerHealth stopped = peer(1, 1, 5, 4, milliseconds(6000));
  stopped.node_age = milliseconds(300);
  EXPECT_EQ(RankHealth::state_of(stopped, 5, kStale), RankState::frozen);
  stopped.node_age = milliseconds(-1);  // no launcher key (mpirun)
  EXPECT_EQ(RankHealth::state_of(stopped, 5, kStale), RankState::frozen);
  stopped.node_age = milliseconds(6500);
  EXPECT_EQ(RankHealth::state_of(stopped, 5, kStale), RankState::unreachable);
}

TEST(RankHealth, EveryoneWaitingBlamesTheEngine) {
  auto r = report({peer(0, 0, 9, 8), peer(1, 0, 9, 8)});
  EXPECT_EQ(RankHealth::explain(r, 9, "gloo", kStale),
            "every rank entered it and is still responding, so it is stuck or failed inside gloo (a peer process "
            "died, or the network between ranks is down); ranks 0, 1 are waiting in it");
}

TEST(RankHealth, UnknownWhenTheStoreCannotBeRead) {
  RankHealth::Report r;
  r.why_unknown = "store at 10.0.0.1:29500 (job j): read_aged: timed out waiting for the reply";
  EXPECT_EQ(RankHealth::explain(r, 3, "gloo", kStale),
            "which ranks are at fault is unknown (store at 10.0.0.1:29500 (job j): read_aged: timed out waiting "
            "for the reply)");
}

TEST(RankHealth, WireFormatRoundTrips) {
  PeerHealth p = peer(3, 2, 77, 76);
  p.step = 12;
  PeerHealth q;
  ASSERT_TRUE(RankHealth::decode(RankHealth::encode(p), q));
  EXPECT_EQ(q.node, 2);
  EXPECT_EQ(q.pid, 1003);
  EXPECT_EQ(q.host, "h2");
  EXPECT_EQ(q.entered, 77u);
  EXPECT_EQ(q.completed, 76u);
  EXPECT_EQ(q.step, 12);
  PeerHealth bad;
  EXPECT_FALSE(RankHealth::decode("node=1 pid=x host=h entered=1 completed=1 step=0", bad));
  EXPECT_FALSE(RankHealth::decode("garbage", bad));
  EXPECT_FALSE(RankHealth::decode("node=1", bad));
}

TEST(RankHealth, HeartbeatReachesTheStoreAndIsReadBack) {
  StoreServer server(StoreServerOptions{"127.0.0.1", 0, "health"});
  TcpStoreOptions o;
  o.port = server.port();
  o.job_id = "health";
  auto base = std::make_shared<TcpStore>(o);
  auto store = std::make_shared<PrefixStore>("g/", base);
  HealthOptions ho;
  ho.node = 3;
  RankHealth h0(store, 0, 2, ho);
  RankHealth h1(store, 1, 2, ho);
  h1.entered(1);
  h1.completed(1);
  h1.entered(2);
  h1.step_done(7);
  ASSERT_TRUE(h1.flush(std::chrono::seconds(20)));
  h0.entered(1);
  h0.completed(1);
  h0.entered(2);
  const auto r = h0.read();
  ASSERT_TRUE(r.known) << r.why_unknown;
  ASSERT_EQ(r.peers.size(), 2u);
  EXPECT_EQ(r.peers[1].entered, 2u);
  EXPECT_EQ(r.peers[1].completed, 1u);
  EXPECT_EQ(r.peers[1].step, 7);
  EXPECT_EQ(r.peers[1].node, 3);
  EXPECT_EQ(r.peers[1].pid, getpid());
  EXPECT_FALSE(r.peers[1].gone);
  EXPECT_EQ(r.peers[0].entered, 2u);  // itself, from its own counters
  // The raw key is where tandemrun reads it.
  auto raw = base->read_aged({"g/health/1"});
  ASSERT_TRUE(raw[0].has_value());
  PeerHealth p;
  ASSERT_TRUE(RankHealth::decode(raw[0]->value, p));
  EXPECT_EQ(p.step, 7);
}

TEST(FlightRecorder, KeepsTheLastOpsWithTheirStates) {
  setenv("TANDEM_FLIGHT_RECORDER_SIZE", "4", 1);
  FlightRecorder rec(FlightIdentity{"gloo", 1, 2, 0});
  unsetenv("TANDEM_FLIGHT_RECORDER_SIZE");
  std::vector<float> buf(10);
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    Collective c{OpType::allreduce, seq, ReduceOp::sum, 0, true, cpu_buffer(buf.data(), 10), cpu_buffer(buf.data(), 10)};
    rec.enqueued(c);
    if (seq <= 5) rec.started(seq);
    if (seq <= 4) rec.ended(seq, seq != 4);
  }
  const auto j = nlohmann::json::parse(rec.to_json("test"));
  EXPECT_EQ(j["format"], "tandem-flight-recorder");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["reason"], "test");
  EXPECT_EQ(j["capacity"], 4);
  EXPECT_EQ(j["recorded"], 6);
  ASSERT_EQ(j["entries"].size(), 4u);
  EXPECT_EQ(j["entries"][0]["seq"], 3);
  EXPECT_EQ(j["entries"][0]["state"], "completed");
  EXPECT_EQ(j["entries"][1]["state"], "failed");
  EXPECT_EQ(j["entries"][2]["state"], "running");
  EXPECT_TRUE(j["entries"][2]["ended_unix_us"].is_null());
  EXPECT_EQ(j["entries"][3]["state"], "queued");
  EXPECT_TRUE(j["entries"][3]["started_unix_us"].is_null());
  EXPECT_EQ(j["entries"][3]["op"], "allreduce");
  EXPECT_EQ(j["entries"][3]["dtype"], "f32");
  EXPECT_EQ(j["entries"][3]["bytes"], 40);
  EXPECT_LE(j["entries"][0]["enqueued_unix_us"].get<int64_t>(), j["entries"][0]["ended_unix_us"].get<int64_t>());
}

TEST(FlightRecorder, Sigusr1RequestsADump) {
  FlightRecorder rec(FlightIdentity{"shm", 0, 1, -1});
  EXPECT_FALSE(rec.dump_requested());
  raise(SIGUSR1);  // the handler only counts; delivered synchronously to this thread
  EXPECT_TRUE(rec.dump_requested());
  EXPECT_FALSE(rec.dump_requested());
}

}  // namespace
}  // namespace tandem
