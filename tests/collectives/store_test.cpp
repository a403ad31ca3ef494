// Store tests in one process: a real server on a kernel-chosen port, real clients,
// and raw sockets writing malformed bytes. No sleeps: blocking calls are released by
// the events they wait for, and timeouts are only asserted as errors, never timed.
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/store.h"
#include "collectives/store_protocol.h"
#include "tests/collectives/raw_socket.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TcpStoreOptions client_options(int port, std::string job = "test-job") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.job_id = std::move(job);
  o.connect_timeout = seconds(20);
  o.op_timeout = seconds(20);
  return o;
}

struct Fixture : ::testing::Test {
  StoreServer server{StoreServerOptions{"127.0.0.1", 0, "test-job"}};
  TcpStore store{client_options(server.port())};
};

TEST_F(Fixture, SetGetCheckDelete) {
  store.set("a", "alpha");
  EXPECT_EQ(store.get("a", seconds(5)), "alpha");
  EXPECT_EQ(store.try_get("a").value(), "alpha");
  EXPECT_FALSE(store.try_get("missing").has_value());
  EXPECT_TRUE(store.check({"a"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  EXPECT_EQ(store.num_keys(), 1);
  store.set("bin", std::string("\0\x01\xff", 3));
  EXPECT_EQ(store.get("bin", seconds(5)), std::string("\0\x01\xff", 3));
  EXPECT_TRUE(store.delete_key("a"));
  EXPECT_FALSE(store.delete_key("a"));
  EXPECT_FALSE(store.check({"a"}));
}

TEST_F(Fixture, AddIsAnAtomicCounter) {
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  EXPECT_EQ(store.get("n", seconds(5)), "3");
  // Many clients adding concurrently lose no increment.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([port = server.port()] {
      TcpStore mine(client_options(port));
      for (int i = 0; i < 100; ++i) mine.add("n", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.add("n", 0), 403);
  store.set("text", "abc");
  EXPECT_THROW(store.add("text", 1), StoreError);
}

TEST_F(Fixture, AddThatWouldOverflowIsRefused) {
  // Found by fuzzing: value + delta overflowed int64 (undefined behaviour).
  store.add("big", INT64_MAX - 1);
  EXPECT_EQ(store.add("big", 1), INT64_MAX);
  try {
    store.add("big", 1);
    FAIL() << "an overflowing add was accepted";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("add: key 'big' would overflow a 64-bit integer"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(store.get("big", seconds(5)), std::to_string(INT64_MAX));  // unchanged, connection still good
}

TEST_F(Fixture, CompareSet) {
  EXPECT_EQ(store.compare_set("k", "", "first"), "first");    // absent + empty expected: set
  EXPECT_EQ(store.compare_set("k", "wrong", "second"), "first");  // mismatch: unchanged
  EXPECT_EQ(store.compare_set("k", "first", "third"), "third");
  EXPECT_EQ(store.compare_set("absent", "x", "y"), "");  // absent + non-empty expected: nothing
  EXPECT_FALSE(store.check({"absent"}));
}

TEST_F(Fixture, GetBlocksUntilAnotherClientSets) {
  auto waiter = std::async(std::launch::async, [port = server.port()] {
    TcpStore mine(client_options(port));
    return mine.get("late", seconds(30));
  });
  auto waiting_for_both = std::async(std::launch::async, [port = server.port()] {
    TcpStore mine(client_options(port));
    mine.wait({"late", "later"}, seconds(30));
    return true;
  });
  store.set("late", "here");
  EXPECT_EQ(waiter.get(), "here");
  store.set("later", "too");
  EXPECT_TRUE(waiting_for_both.get());
}

TEST_F(Fixture, WaitTimeoutNamesTheMissingKeys) {
  store.set("present", "1");
  try {
    store.wait({"present", "absent/1", "absent/2"}, milliseconds(300));
    FAIL() << "wait returned without its keys";
  } catch (const StoreTimeout& e) {
    EXPECT_EQ(e.missing_keys, (std::vector<std::string>{"absent/1", "absent/2"}));
    EXPECT_NE(std::string(e.what()).find("'absent/1'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'absent/2'"), std::string::npos) << e.what();
  }
  try {
    store.get("nope", milliseconds(200));
    FAIL() << "get returned without its key";
  } catch (const StoreTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
  store.set("after", "ok");  // the connection is still good after a server-side timeout
  EXPECT_EQ(store.get("after", seconds(5)), "ok");
}

TEST_F(Fixture, PrefixStoreKeepsNamespacesApart) {
  PrefixStore a("a/", std::make_shared<TcpStore>(client_options(server.port())));
  PrefixStore b("b/", std::make_shared<TcpStore>(client_options(server.port())));
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get("k", seconds(5)), "from a");
  EXPECT_EQ(store.get("b/k", seconds(5)), "from b");
  try {
    a.wait({"k", "x"}, milliseconds(100));
    FAIL();
  } catch (const StoreTimeout& e) {
    EXPECT_EQ(e.missing_keys, std::vector<std::string>{"x"});
  }
}

TEST_F(Fixture, ReadAgedReturnsValuesAndServerSideAges) {
  store.set("hb/0", "zero");
  store.add("hb/1", 5);
  const auto got = store.read_aged({"hb/0", "missing", "hb/1"});
  ASSERT_EQ(got.size(), 3u);
  ASSERT_TRUE(got[0].has_value());
  EXPECT_EQ(got[0]->value, "zero");
  EXPECT_GE(got[0]->age.count(), 0);
  EXPECT_FALSE(got[1].has_value());
  ASSERT_TRUE(got[2].has_value());
  EXPECT_EQ(got[2]->value, "5");
  PrefixStore prefixed("hb/", std::make_shared<TcpStore>(client_options(server.port())));
  const auto via_prefix = prefixed.read_aged({"0", "2"});
  ASSERT_TRUE(via_prefix[0].has_value());
  EXPECT_EQ(via_prefix[0]->value, "zero");
  EXPECT_FALSE(via_prefix[1].has_value());
  EXPECT_TRUE(store.delete_key("hb/0"));
  EXPECT_FALSE(store.read_aged({"hb/0"})[0].has_value());
}

TEST_F(Fixture, RequestsSentWithTheCloseStillCount) {
  // hello + set, then an orderly close in the same breath: the set must be applied.
  using namespace store_wire;
  Writer hello;
  hello.u32(kMagic).u32(kVersion).str("test-job").str(std::string(32, 'n'));
  Writer set;
  set.u8(static_cast<uint8_t>(Command::set)).str("late").str("applied");
  const int fd = raw_connect(server.port());
  raw_send(fd, cat({hello.frame(), set.frame()}));
  shutdown(fd, SHUT_WR);
  EXPECT_EQ(store.get("late", seconds(20)), "applied");
  close(fd);
}

TEST_F(Fixture, HugeWaitTimeoutIsCappedNotOverflowed) {
  // A get of an absent key with timeout INT64_MAX ms (the fuzzer's find: adding it to
  // the clock overflowed) parks, and is answered when the key appears.
  using namespace store_wire;
  Writer hello;
  hello.u32(kMagic).u32(kVersion).str("test-job").str(std::string(32, 'n'));
  Writer get;
  get.u8(static_cast<uint8_t>(Command::get)).str("eventually").i64(INT64_MAX);
  const int fd = raw_connect(server.port());
  raw_send(fd, cat({hello.frame(), get.frame()}));
  char ok[5];
  ASSERT_EQ(recv(fd, ok, 5, MSG_WAITALL), 5);  // the hello's reply: length 1, status ok
  store.set("eventually", "here");
  char reply[4 + 1 + 4 + 4];
  ASSERT_EQ(recv(fd, reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
  EXPECT_EQ(reply[4], static_cast<char>(Status::ok));
  EXPECT_EQ(std::string(reply + 9, 4), "here");
  close(fd);
}

TEST_F(Fixture, WrongJobIsRefusedWithAClearMessage) {
  try {
    TcpStore other(client_options(server.port(), "other-job"));
    FAIL() << "a client of another job was accepted";
  } catch (const StoreError& e) {
    const std::string want = "store at 127.0.0.1:" + std::to_string(server.port()) + " serves another job, not other-job";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  // The refusal does not say which job the store serves: for a job without a secret, its id
  // is what keeps strangers out.
  const int fd = raw_connect(server.port());
  raw_send(fd, hello_frame("other-job"));
  const std::string reply = read_reply(fd);
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(static_cast<store_wire::Status>(reply[0]), store_wire::Status::wrong_job);
  close(fd);
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
}

TEST_F(Fixture, MalformedMessagesDropOnlyThatClient) {
  const int64_t dropped_before = server.dropped_clients();
  // 1. Garbage instead of a handshake (bad magic).
  const int garbage = raw_connect(server.port());
  raw_send(garbage, cat({le32(8), "GARBAGE!"}));
  EXPECT_TRUE(closed_by_server(garbage));
  close(garbage);
  // 2. A frame declaring 4 GiB: refused from its header alone, nothing buffered.
  const int huge = raw_connect(server.port());
  raw_send(huge, cat({le32(0xffffffffu), "xxxx"}));
  EXPECT_TRUE(closed_by_server(huge));
  close(huge);
  // 3. A valid handshake, then a set whose key length points past the frame.
  const int liar = raw_connect(server.port());
  raw_send(liar, hello_frame("test-job"));
  char ok[5];
  ASSERT_EQ(recv(liar, ok, 5, MSG_WAITALL), 5);  // handshake accepted
  raw_send(liar, cat({le32(1 + 4 + 3), std::string(1, '\x01'), le32(1000), "abc"}));
  EXPECT_TRUE(closed_by_server(liar));
  close(liar);
  // 4. A value over 64 MiB inside a frame under the frame limit cannot exist, but a
  //    key over 4 KiB can: refused.
  const int long_key = raw_connect(server.port());
  raw_send(long_key, hello_frame("test-job"));
  ASSERT_EQ(recv(long_key, ok, 5, MSG_WAITALL), 5);
  const std::string key(5000, 'k');
  raw_send(long_key, cat({le32(1 + 4 + 5000 + 4), std::string(1, '\x01'), le32(5000), key, le32(0)}));
  EXPECT_TRUE(closed_by_server(long_key));
  close(long_key);
  EXPECT_EQ(server.dropped_clients(), dropped_before + 4);
  // The well-behaved client never noticed.
  store.set("fine", "yes");
  EXPECT_EQ(store.get("fine", seconds(5)), "yes");
}

TEST_F(Fixture, StalledClientDoesNotBlockOthers) {
  // Half a handshake, then silence: the server must keep serving everyone else.
  const int stalled = raw_connect(server.port());
  raw_send(stalled, cat({le32(100), "TDM"}));
  // And a client that parks a long get while others work.
  auto parked = std::async(std::launch::async, [port = server.port()] {
    TcpStore mine(client_options(port));
    return mine.get("release", seconds(30));
  });
  for (int i = 0; i < 50; ++i) store.set(std::string("k").append(std::to_string(i)), "v");
  EXPECT_EQ(store.num_keys(), 50);
  store.set("release", "go");
  EXPECT_EQ(parked.get(), "go");
  close(stalled);
}

TEST(StoreServer, BusyPortIsReportedClearly) {
  StoreServer first(StoreServerOptions{"127.0.0.1", 0, "a"});
  try {
    StoreServer second(StoreServerOptions{"127.0.0.1", first.port(), "a"});
    FAIL() << "two servers bound one port";
  } catch (const StoreError& e) {
    const std::string want = "port " + std::to_string(first.port()) + " on 127.0.0.1 is in use";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(StoreServer, ClientRetriesUntilTheServerStarts) {
  // Find a free port, release it, and start the client before any server exists.
  int port;
  {
    StoreServer probe(StoreServerOptions{"127.0.0.1", 0, "late"});
    port = probe.port();
  }
  auto client = std::async(std::launch::async, [port] {
    TcpStore store(client_options(port, "late"));
    store.set("hello", "world");
    return store.get("hello", seconds(5));
  });
  StoreServer server(StoreServerOptions{"127.0.0.1", port, "late"});
  EXPECT_EQ(client.get(), "world");
}

TEST(StoreServer, ConnectGivesUpAtItsDeadline) {
  int port;
  {
    StoreServer probe(StoreServerOptions{"127.0.0.1", 0, "x"});
    port = probe.port();
  }
  TcpStoreOptions o = client_options(port, "x");
  o.connect_timeout = milliseconds(300);
  try {
    TcpStore store(o);
    FAIL() << "connected to nothing";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to store at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
  }
}

TEST(StoreServer, LargeValuesRoundTrip) {
  StoreServer server(StoreServerOptions{"127.0.0.1", 0, "big"});
  TcpStore store(client_options(server.port(), "big"));
  std::string value(8 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 31);
  store.set("big", value);
  EXPECT_EQ(store.get("big", seconds(20)), value);
}

}  // namespace
}  // namespace tandem
