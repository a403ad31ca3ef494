// The elastic rendezvous's records (launcher/elastic_records.h): what a node writes it reads
// back, and what a holder of the secret could write wrongly is a RecordError.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/elastic_records.h"

namespace tandem::launcher {
namespace {

TEST(ElasticRecords, ArrivalAndDecisionRoundTrip) {
  const ElasticMember a{3, "fd00::3", "c"};
  const ElasticMember back = parse_arrival(arrival_record(a));
  EXPECT_EQ(back.id, 3);
  EXPECT_EQ(back.addr, "fd00::3");
  EXPECT_EQ(back.host, "c");

  const Decision d = parse_decision(go_record({{1, "a1", "a"}, a}, 2, 1, "node id 2 (host b) left"), 5, 3, 4);
  EXPECT_EQ(d.kind, "go");
  EXPECT_EQ(d.generation.number, 5);
  ASSERT_EQ(d.generation.members.size(), 2u);
  EXPECT_EQ(d.generation.node_rank, 1);
  EXPECT_EQ(d.generation.failure_restarts, 2);
  EXPECT_EQ(d.generation.membership_changes, 1);
  EXPECT_EQ(d.generation.change, "node id 2 (host b) left");
}

TEST(ElasticRecords, NumbersOutOfRangeAreRefused) {
  // A 75-digit id parses as a float (the fuzzer's input): refused, never converted.
  const std::string huge(75, '6');
  for (const std::string& id : std::vector<std::string>{huge, "1.5", "-1", "\"3\"", "18446744073709551615"}) {
    EXPECT_THROW(parse_arrival(R"({"id":)" + id + R"(,"addr":"a","host":"h"})"), RecordError) << id;
  }
  const auto go = [](const std::string& restarts) {
    return R"({"decision":"go","failure_restarts":)" + restarts +
           R"(,"membership_changes":0,"change":"","members":[{"id":0,"addr":"a","host":"h"}]})";
  };
  EXPECT_NO_THROW(parse_decision(go("2147483647"), 1, 0, 1));
  for (const std::string& n : std::vector<std::string>{"2147483648", "-1", "1e300", huge}) {
    EXPECT_THROW(parse_decision(go(n), 1, 0, 1), RecordError) << n;
  }
}

}  // namespace
}  // namespace tandem::launcher
