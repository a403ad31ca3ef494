// PendingHandshakes (collectives/pending_handshakes.h): the cap, which connection it drops
// (the oldest of the address holding the most), deadlines, and the address keys.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <gtest/gtest.h>

#include "collectives/pending_handshakes.h"

namespace tandem {
namespace {

using Clock = PendingHandshakes::Clock;
using std::chrono::seconds;

TEST(PendingHandshakes, PastTheCapTheOldestOfTheBusiestAddressGoes) {
  PendingHandshakes p(4);
  const auto t = Clock::now();
  EXPECT_EQ(p.add(1, "rank", t), std::nullopt);
  EXPECT_EQ(p.add(2, "flood", t), std::nullopt);
  EXPECT_EQ(p.add(3, "flood", t), std::nullopt);
  EXPECT_EQ(p.add(4, "flood", t), std::nullopt);
  // Full: every newcomer pushes out the flood's oldest, never the rank's one connection.
  EXPECT_EQ(p.add(5, "flood", t), 2u);
  EXPECT_EQ(p.add(6, "flood", t), 3u);
  EXPECT_EQ(p.add(7, "other", t), 4u);
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.from("rank"), 1u);
  EXPECT_EQ(p.from("flood"), 2u);
  EXPECT_EQ(p.from("other"), 1u);
  // A newcomer from the busiest address may push out its own address's oldest only.
  EXPECT_EQ(p.add(8, "flood", t), 5u);
  // Equal counts (rank 2, other 2): the address that sorts last loses its oldest, so the
  // choice is deterministic.
  p.remove(6);
  p.remove(8);
  EXPECT_EQ(p.add(9, "rank", t), std::nullopt);
  EXPECT_EQ(p.add(10, "other", t), std::nullopt);
  EXPECT_EQ(p.add(11, "zzz", t), 1u);
}

TEST(PendingHandshakes, RemovedAndExpiredOnesAreForgotten) {
  PendingHandshakes p(8);
  const auto t = Clock::now();
  p.add(1, "a", t + seconds(1));
  p.add(2, "b", t + seconds(2));
  p.add(3, "a", t + seconds(3));
  EXPECT_EQ(p.next_deadline(), t + seconds(1));
  p.remove(1);
  p.remove(1);   // twice: ignored
  p.remove(99);  // unknown: ignored
  EXPECT_EQ(p.next_deadline(), t + seconds(2));
  EXPECT_EQ(p.expired(t + seconds(1)), std::vector<uint64_t>{});
  EXPECT_EQ(p.expired(t + seconds(3)), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.from("a"), 0u);
  EXPECT_EQ(p.next_deadline(), std::nullopt);
}

TEST(PendingHandshakes, AddressKeysGroupAHostsAddresses) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.7", &v4.sin_addr);
  v4.sin_port = htons(41234);
  EXPECT_EQ(address_key(&v4), "10.0.0.7");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", &v6.sin6_addr);
  EXPECT_EQ(address_key(&v6), "2001:db8:1:2::/64");
  inet_pton(AF_INET6, "::ffff:192.168.1.9", &v6.sin6_addr);
  EXPECT_EQ(address_key(&v6), "192.168.1.9");
  sockaddr other{};
  other.sa_family = AF_UNIX;
  EXPECT_EQ(address_key(&other), "other");
}

}  // namespace
}  // namespace tandem
