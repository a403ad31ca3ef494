// The store's job-secret handshake (collectives/store_auth.h) over real sockets: the
// right secret is let in; no secret, a wrong one, a replayed handshake, truncated or
// garbage frames, an old client, a half-finished handshake and a flood are refused,
// counted exactly, and never stop the server serving the job's own clients. No sleeps:
// every wait ends on an event (a reply, a close), bounded only against a hang.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/init.h"
#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "collectives/store_protocol.h"
#include "tests/collectives/raw_socket.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using store_wire::Status;

// Fixed, so failures reproduce; shaped like `openssl rand -hex 32`'s (secret_problem passes it).
const std::string kSecret = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const std::string kWrongSecret = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";
const std::string kJob = "auth-job";

TcpStoreOptions secret_client_options(int port, std::string secret) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.job_id = kJob;
  o.secret = std::move(secret);
  o.connect_timeout = seconds(20);
  o.op_timeout = seconds(20);
  return o;
}

StoreServerOptions server_options(std::string secret) { return {"127.0.0.1", 0, kJob, std::move(secret)}; }

struct AuthFixture : ::testing::Test {
  StoreServer server{server_options(kSecret)};
  TcpStore store{secret_client_options(server.port(), kSecret)};
};

std::string error_of(const TcpStoreOptions& o) {
  try {
    TcpStore s(o);
  } catch (const StoreError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A raw client's handshake up to the challenge: returns the server's nonce, and checks
// that the challenge holds nothing else (nothing made from the secret).
std::string challenge(int fd, const std::string& client_nonce) {
  raw_send(fd, hello_frame(kJob, client_nonce));
  const std::string body = read_reply(fd);
  EXPECT_FALSE(body.empty());
  if (body.empty()) return {};
  EXPECT_EQ(static_cast<Status>(body[0]), Status::challenge);
  store_wire::Reader in(std::string_view(body).substr(1));
  std::string nonce = in.str(64);
  EXPECT_TRUE(in.ok() && in.done());
  EXPECT_EQ(nonce.size(), store_auth::kNonceBytes);
  return nonce;
}

std::string proof_frame(const std::string& proof) {
  store_wire::Writer w;
  w.str(proof);
  return w.frame();
}

TEST_F(AuthFixture, TheRightSecretIsLetIn) {
  store.set("k", "v");
  TcpStore other(secret_client_options(server.port(), kSecret));
  EXPECT_EQ(other.get("k", seconds(5)), "v");
  EXPECT_EQ(server.refused_clients(), 0);
}

TEST_F(AuthFixture, NoSecretIsRefusedWithAClearMessage) {
  const std::string e = error_of(secret_client_options(server.port(), ""));
  EXPECT_NE(e.find("the store requires the job secret, which this process lacks"), std::string::npos) << e;
  EXPECT_EQ(server.refused_clients(), 1);
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
}

TEST_F(AuthFixture, WrongSecretIsRefusedWithAClearMessage) {
  const std::string e = error_of(secret_client_options(server.port(), kWrongSecret));
  EXPECT_NE(e.find("the store refused this process's proof of the job secret: this process's secret differs from "
                   "the store's"),
            std::string::npos)
      << e;
  // A raw client with the wrong proof is told auth_failed, and nothing else, and closed.
  const int fd = raw_connect(server.port());
  const std::string nonce(32, 'c');
  const std::string server_nonce = challenge(fd, nonce);
  raw_send(fd, proof_frame(store_auth::proof(kWrongSecret, store_auth::Role::client, kJob, nonce, server_nonce)));
  const std::string reply = read_reply(fd);
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(static_cast<Status>(reply[0]), Status::auth_failed);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_clients(), 2);
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
}

TEST_F(AuthFixture, TheStoreProvesItselfOnlyAfterTheClientAndFreshPerConnection) {
  // Two connections with the same client nonce: fresh server nonces, and the store's proof
  // only in the ok that answers a right proof.
  const std::string nonce(32, 'c');
  const int a = raw_connect(server.port());
  const int b = raw_connect(server.port());
  const std::string nonce_a = challenge(a, nonce);
  const std::string nonce_b = challenge(b, nonce);
  EXPECT_NE(nonce_a, nonce_b);
  for (const auto& [fd, server_nonce] : {std::pair{a, nonce_a}, std::pair{b, nonce_b}}) {
    raw_send(fd, proof_frame(store_auth::proof(kSecret, store_auth::Role::client, kJob, nonce, server_nonce)));
    const std::string ok = read_reply(fd);
    ASSERT_FALSE(ok.empty());
    EXPECT_EQ(static_cast<Status>(ok[0]), Status::ok);
    store_wire::Reader in(std::string_view(ok).substr(1));
    EXPECT_EQ(in.str(64), store_auth::proof(kSecret, store_auth::Role::server, kJob, nonce, server_nonce));
    EXPECT_TRUE(in.ok() && in.done());
    close(fd);
  }
  EXPECT_EQ(server.refused_clients(), 0);
}

// A program on the store's port that does not know the secret: it answers the hello with a
// challenge and the client's proof with an ok whose proof is not the store's.
TEST(StoreAuth, AClientRefusesAStoreThatCannotProveTheSecret) {
  int port = 0;
  const int listener = raw_listen(port);
  std::thread squatter([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    read_reply(fd);  // the hello
    raw_send(fd, store_wire::Writer().u8(static_cast<uint8_t>(Status::challenge)).str(std::string(32, 's')).frame());
    read_reply(fd);  // the client's proof
    raw_send(fd, store_wire::Writer().u8(static_cast<uint8_t>(Status::ok)).str(std::string(32, 'p')).frame());
    closed_by_server(fd);  // until the client closes
    close(fd);
  });
  const std::string e = error_of(secret_client_options(port, kSecret));
  squatter.join();
  close(listener);
  EXPECT_NE(e.find("the store could not prove it knows the job secret"), std::string::npos) << e;
}

// A store that closes a handshake without answering (as one under a flood drops pending
// handshakes): the client connects again, backing off, until its deadline.
TEST(StoreAuth, AClientWhoseHandshakeIsCutOffRetries) {
  int port = 0;
  const int listener = raw_listen(port);
  std::thread store([listener] {
    const int first = accept(listener, nullptr, nullptr);
    read_reply(first);
    close(first);  // cut off after the hello
    const int second = accept(listener, nullptr, nullptr);
    read_reply(second);
    raw_send(second, store_wire::Writer().u8(static_cast<uint8_t>(Status::ok)).frame());  // no secret: let in
    closed_by_server(second);
    close(second);
  });
  { TcpStore in(secret_client_options(port, "")); }
  store.join();
  close(listener);
}

TEST(StoreAuth, AClientCutOffUntilItsDeadlineSaysWhy) {
  int port = 0;
  const int listener = raw_listen(port);
  std::atomic<bool> done{false};
  std::thread store([&] {
    for (;;) {
      const int fd = accept(listener, nullptr, nullptr);
      if (done) return close(fd), void();
      read_reply(fd);
      close(fd);
    }
  });
  TcpStoreOptions o = secret_client_options(port, "");
  o.connect_timeout = milliseconds(500);
  try {
    TcpStore s(o);
    ADD_FAILURE() << "accepted";
  } catch (const StoreUnreachable& e) {
    EXPECT_NE(std::string(e.what()).find("within 500 ms: the store closed the connection during the handshake"),
              std::string::npos)
        << e.what();
  }
  done = true;
  close(raw_connect(port));  // wakes the fake store's accept
  store.join();
  close(listener);
}

// Strangers from one address (127.0.0.2) fill every pending slot and more; a handshake
// from another address (127.0.0.1) under way all along is never the one dropped.
TEST(StoreAuth, AFloodFromOneAddressCannotEvictAnothersHandshake) {
  StoreServerOptions so = server_options(kSecret);
  so.handshake_timeout = std::chrono::minutes(10);  // only the cap acts here
  StoreServer server(so);
  const int rank = raw_connect(server.port(), "127.0.0.1");
  const std::string nonce(32, 'r');
  const std::string server_nonce = challenge(rank, nonce);
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) flood.push_back(raw_connect(server.port(), "127.0.0.2"));
  // 301 pending: the 45 oldest of 127.0.0.2's are dropped, in order.
  for (int i = 0; i < 45; ++i) EXPECT_TRUE(closed_by_server(flood[i])) << "connection " << i;
  raw_send(rank, proof_frame(store_auth::proof(kSecret, store_auth::Role::client, kJob, nonce, server_nonce)));
  const std::string ok = read_reply(rank);
  ASSERT_FALSE(ok.empty());
  EXPECT_EQ(static_cast<Status>(ok[0]), Status::ok);
  EXPECT_EQ(server.refused_clients(), 45);
  close(rank);
  for (int fd : flood) close(fd);
}

TEST_F(AuthFixture, AReplayedHandshakeIsRefused) {
  // Record every byte a real client with the secret sends, and check it was let in.
  const std::string nonce = store_auth::random_bytes(32);
  std::string recorded = hello_frame(kJob, nonce);
  const int first = raw_connect(server.port());
  const std::string server_nonce = challenge(first, nonce);
  const std::string proof = proof_frame(store_auth::proof(kSecret, store_auth::Role::client, kJob, nonce, server_nonce));
  recorded += proof;
  raw_send(first, proof);
  const std::string ok = read_reply(first);
  ASSERT_EQ(ok.size(), 1 + 4 + store_auth::kProofBytes);
  EXPECT_EQ(static_cast<Status>(ok[0]), Status::ok);
  close(first);
  // The same bytes on a new connection: the server's nonce differs, so does the proof.
  const int replay = raw_connect(server.port());
  raw_send(replay, recorded);
  std::string body = read_reply(replay);
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(static_cast<Status>(body[0]), Status::challenge);
  body = read_reply(replay);
  ASSERT_EQ(body.size(), 1u);
  EXPECT_EQ(static_cast<Status>(body[0]), Status::auth_failed);
  EXPECT_TRUE(closed_by_server(replay));
  close(replay);
  EXPECT_EQ(server.refused_clients(), 1);
}

TEST_F(AuthFixture, TruncatedAndGarbageHandshakesDropOnlyThatClient) {
  const std::vector<std::string> bad_proofs = {
      cat({le32(4), le32(100)}),                   // a proof longer than its frame
      cat({le32(4 + 40), le32(40), std::string(40, 'x')}),  // longer than a proof may be
      cat({le32(3), "abc"}),                       // not even a length
      cat({le32(4 + 32 + 1), le32(32), std::string(33, 'x')}),  // trailing byte
      proof_frame(std::string(32, '\0')),          // well formed, wrong
  };
  for (const auto& bad : bad_proofs) {
    const int fd = raw_connect(server.port());
    challenge(fd, std::string(32, 'g'));
    raw_send(fd, bad);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  // Hellos that are wrong before any challenge: a short nonce, no nonce, garbage.
  for (const auto& bad : {hello_frame(kJob, "short"), cat({le32(4 + 4 + 4 + 8), le32(store_wire::kMagic),
                                                           le32(store_wire::kVersion), le32(8), kJob}),
                          cat({le32(8), "GARBAGE!"})}) {
    const int fd = raw_connect(server.port());
    raw_send(fd, bad);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  // A frame cut short, then the close.
  const int cut = raw_connect(server.port());
  const std::string hello = hello_frame(kJob);
  raw_send(cut, hello.substr(0, hello.size() / 2));
  shutdown(cut, SHUT_WR);
  EXPECT_TRUE(closed_by_server(cut));
  close(cut);
  EXPECT_EQ(server.refused_clients(), static_cast<int64_t>(bad_proofs.size()) + 3 + 1);
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
}

TEST_F(AuthFixture, AStrangersFramesAreCappedAtWhatAHandshakeNeeds) {
  // The largest hello there is (a job id of kMaxKeyBytes) is read and answered.
  const std::string longest_job(StoreLimits::kMaxKeyBytes, 'j');
  const int fd = raw_connect(server.port());
  raw_send(fd, hello_frame(longest_job));
  const std::string body = read_reply(fd);
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(static_cast<Status>(body[0]), Status::wrong_job);
  close(fd);
  // Dropped: a declared 8 MiB hello at its header, whatever follows; a hello one byte past
  // the largest; a hello with more bytes behind it before any answer.
  const std::string hello = hello_frame(kJob);
  const std::vector<std::string> bad = {
      cat({le32(8u << 20), std::string(64 * 1024, 'x')}),
      hello_frame(longest_job + "j"),
      cat({hello, std::string(8 * 1024, 'x')}),
  };
  for (const auto& bytes : bad) {
    const int s = raw_connect(server.port());
    send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL);  // the store may close before it all arrives
    EXPECT_TRUE(closed_by_server(s));
    close(s);
  }
  EXPECT_EQ(server.refused_clients(), 1 + static_cast<int64_t>(bad.size()));
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
  // After the handshake the general limit applies: a 1 MiB value round-trips.
  const std::string big(1 << 20, 'v');
  store.set("big", big);
  EXPECT_EQ(store.get("big", seconds(5)), big);
}

TEST_F(AuthFixture, AnOldClientIsToldTheVersion) {
  // A version-2 hello (no nonce): refused with bad_version and this store's version.
  const int fd = raw_connect(server.port());
  raw_send(fd, cat({le32(4 + 4 + 4 + static_cast<uint32_t>(kJob.size())), le32(store_wire::kMagic), le32(2),
                    le32(static_cast<uint32_t>(kJob.size())), kJob}));
  const std::string reply = read_reply(fd);
  ASSERT_EQ(reply.size(), 5u);
  EXPECT_EQ(static_cast<Status>(reply[0]), Status::bad_version);
  EXPECT_EQ(store_wire::read_frame_length(reply.data() + 1), store_wire::kVersion);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  // A version-3 hello (the store proved itself first then): the same.
  const int v3 = raw_connect(server.port());
  raw_send(v3, hello_frame(kJob, std::string(32, 'n'), 3));
  const std::string reply3 = read_reply(v3);
  ASSERT_EQ(reply3.size(), 5u);
  EXPECT_EQ(static_cast<Status>(reply3[0]), Status::bad_version);
  EXPECT_EQ(store_wire::read_frame_length(reply3.data() + 1), store_wire::kVersion);
  EXPECT_TRUE(closed_by_server(v3));
  close(v3);
  EXPECT_EQ(server.refused_clients(), 2);
}

TEST(StoreAuth, AClientWithASecretRefusesAStoreWithout) {
  StoreServer open_server(server_options(""));
  const std::string e = error_of(secret_client_options(open_server.port(), kSecret));
  EXPECT_NE(e.find("the store does not ask for the job secret, but this process has one"), std::string::npos) << e;
  TcpStore without(secret_client_options(open_server.port(), ""));  // as before version 3
  without.set("a", "b");
  EXPECT_EQ(without.get("a", seconds(5)), "b");
}

TEST(StoreAuth, AHalfFinishedHandshakeIsDroppedAtItsDeadlineAndBlocksNoOne) {
  StoreServerOptions so = server_options(kSecret);
  so.handshake_timeout = milliseconds(300);
  StoreServer server(so);
  const int held = raw_connect(server.port());
  challenge(held, std::string(32, 'h'));  // and never the proof
  const int silent = raw_connect(server.port());  // connected, not a byte sent
  // Meanwhile the job's own clients connect and work.
  TcpStore a(secret_client_options(server.port(), kSecret));
  TcpStore b(secret_client_options(server.port(), kSecret));
  a.set("x", "1");
  EXPECT_EQ(b.get("x", seconds(5)), "1");
  // The server closes both at their deadline (the reads wait for that, bounded at 20 s).
  EXPECT_TRUE(closed_by_server(held));
  EXPECT_TRUE(closed_by_server(silent));
  close(held);
  close(silent);
  EXPECT_EQ(server.refused_clients(), 2);
  EXPECT_EQ(b.get("x", seconds(5)), "1");
}

TEST(StoreAuth, AFloodOfFailedHandshakesIsCountedAndTheServerServesOn) {
  StoreServer server(server_options(kSecret));
  TcpStore store(secret_client_options(server.port(), kSecret));
  constexpr int kFlood = 300;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = raw_connect(server.port());
    const std::string nonce(32, static_cast<char>(i));
    challenge(fd, nonce);
    raw_send(fd, proof_frame(std::string(32, 'w')));
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  EXPECT_EQ(server.refused_clients(), kFlood);
  store.set("after", "flood");
  EXPECT_EQ(store.get("after", seconds(5)), "flood");
}

TEST(StoreAuth, SecretsAreCheckedWhereTheyAreRead) {
  EXPECT_EQ(store_auth::generate_secret().size(), 64u);
  EXPECT_NE(store_auth::generate_secret(), store_auth::generate_secret());
  EXPECT_EQ(store_auth::secret_problem(kSecret), "");
  EXPECT_EQ(store_auth::secret_problem(""), "it is empty");
  EXPECT_EQ(store_auth::secret_problem("short"),
            "it is 5 bytes long, shorter than the 32 bytes a secret needs (make one with `openssl rand -hex 32`)");
  EXPECT_EQ(store_auth::secret_problem(kSecret.substr(0, 32) + "\nsecond line"),
            "it contains a NUL, CR or LF byte (one secret on one line)");
  // Visibly not random: one byte, a short pattern, too few hex digits, a short passphrase.
  EXPECT_EQ(store_auth::secret_problem(std::string(64, 'a')), "it is one byte repeated 64 times");
  std::string pattern;
  for (int i = 0; i < 16; ++i) pattern += "k3y!";
  EXPECT_EQ(store_auth::secret_problem(pattern), "it repeats a pattern of 4 bytes (make one with `openssl rand -hex 32`)");
  const std::string too_few_bits_tail =
      " a secret needs (hex digits count 4 bits each, words 2, base64 and other printable text 6, other bytes 8; make "
      "one with `openssl rand -hex 32`)";
  EXPECT_EQ(store_auth::secret_problem(kSecret.substr(0, 48)),
            "it can hold at most 192 bits of randomness judged by its characters, fewer than the 256" +
                too_few_bits_tail);
  const std::string words = "correct horse battery staple, the job's own secret";
  EXPECT_EQ(store_auth::secret_problem(words),
            "it can hold at most " + std::to_string(2 * words.size()) +
                " bits of randomness judged by its characters, fewer than the 256" + too_few_bits_tail);
  // Enough: 43 base64 characters and a '=' (32 random bytes), a passphrase of 128
  // characters, 32 bytes of text with bytes past ASCII.
  EXPECT_EQ(store_auth::secret_problem("n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg="), "");
  EXPECT_EQ(store_auth::secret_problem(std::string("correct horse battery staple, ") + "wobbly lantern quietly orbits "
                                       "a purple kettle near seven foggy harbours, while eleven brisk otters "
                                       "debate umbrellas"),
            "");
  EXPECT_EQ(store_auth::secret_problem("\xd7\xa1\xd7\x95\xd7\x93 \xe7\xa7\x98\xe5\xaf\x86 \xc3\xa9t\xc3\xa9 r\xc3\xb8"
                                       "d gr\xc3\xb8"
                                       "d \xd1\x82\xd0\xb0\xd0\xb9"),
            "");
  const auto dir = std::filesystem::temp_directory_path() / ("tandem-secret-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  EXPECT_EQ(store_auth::read_secret_file(write("nl", kSecret + "\n"), "f"), kSecret);
  EXPECT_EQ(store_auth::read_secret_file(write("crlf", kSecret + "\r\n"), "f"), kSecret);
  const auto refusal = [](const std::string& path) {
    try {
      store_auth::read_secret_file(path, "--job-secret-file " + path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string missing = (dir / "absent").string();
  EXPECT_EQ(refusal(missing), "--job-secret-file " + missing + ": cannot open the job secret file: No such file or directory");
  const std::string empty = write("empty", "");
  EXPECT_EQ(refusal(empty), "--job-secret-file " + empty + ": not a usable job secret: it is empty");
  const std::string two = write("two", kSecret + "\n" + kSecret + "\n");
  EXPECT_EQ(refusal(two), "--job-secret-file " + two +
                              ": not a usable job secret: it contains a NUL, CR or LF byte (one secret on one line)");
  // From an inherited descriptor, readable again (pread from 0).
  const int fd = open(write("fd", kSecret).c_str(), O_RDONLY);
  EXPECT_EQ(store_auth::read_secret_fd(fd, "fd"), kSecret);
  EXPECT_EQ(store_auth::read_secret_fd(fd, "fd"), kSecret);
  close(fd);
  std::filesystem::remove_all(dir);
}

TEST(StoreAuth, AFloodOfHalfOpenConnectionsEvictsTheOldestNotTheJob) {
  StoreServerOptions so = server_options(kSecret);
  so.handshake_timeout = std::chrono::minutes(10);  // only the cap of 256 pending acts here
  StoreServer server(so);
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(raw_connect(server.port()));
  // The job's client is let in: its handshake makes 257 pending, which evicts one more.
  TcpStore store(secret_client_options(server.port(), kSecret));
  store.set("k", "v");
  EXPECT_EQ(store.get("k", seconds(5)), "v");
  for (int i = 0; i < 45; ++i) EXPECT_TRUE(closed_by_server(silent[i])) << "connection " << i;
  EXPECT_EQ(server.refused_clients(), 45);
  for (int fd : silent) close(fd);
}

TEST(StoreAuth, TheLaunchEnvironmentNamesAnUnusableSecret) {
  const auto error_for = [](std::map<std::string, std::string> vars) {
    vars.emplace("RANK", "0");
    vars.emplace("WORLD_SIZE", "1");
    vars.emplace("MASTER_ADDR", "127.0.0.1");
    vars.emplace("MASTER_PORT", "29500");
    try {
      read_launch_env([&](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
      });
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_for({{"TANDEM_JOB_SECRET_FD", "x"}}),
            "environment variable TANDEM_JOB_SECRET_FD='x' is not an integer in [0, 1048576]");
  EXPECT_EQ(error_for({{"TANDEM_JOB_SECRET_FILE", "/nonexistent/secret"}}),
            "environment variable TANDEM_JOB_SECRET_FILE=/nonexistent/secret: cannot open the job secret file: No "
            "such file or directory");
  const int bad_fd = 987654;  // not open
  const std::string only_tandemruns =
      ": the secret reaches only the programs tandemrun starts, not their children (give this process "
      "TANDEM_JOB_SECRET_FILE)";
  EXPECT_EQ(error_for({{"TANDEM_JOB_SECRET_FD", std::to_string(bad_fd)}}),
            "environment variable TANDEM_JOB_SECRET_FD=987654: descriptor 987654 is not open" + only_tandemruns);
  // A descriptor open on another file is not read as a secret.
  const int other = open("/dev/null", O_RDONLY);
  EXPECT_EQ(error_for({{"TANDEM_JOB_SECRET_FD", std::to_string(other)}}),
            "environment variable TANDEM_JOB_SECRET_FD=" + std::to_string(other) + ": descriptor " +
                std::to_string(other) + " is '/dev/null', not tandemrun's job-secret memfd" + only_tandemruns);
  close(other);
}

TEST(StoreAuth, ProofsDependOnEveryInput) {
  const std::string nc(32, 'c'), ns(32, 's');
  const std::string p = store_auth::proof(kSecret, store_auth::Role::client, kJob, nc, ns);
  EXPECT_EQ(p.size(), store_auth::kProofBytes);
  EXPECT_TRUE(store_auth::proofs_equal(p, store_auth::proof(kSecret, store_auth::Role::client, kJob, nc, ns)));
  EXPECT_FALSE(store_auth::proofs_equal(p, store_auth::proof(kSecret, store_auth::Role::server, kJob, nc, ns)));
  EXPECT_FALSE(store_auth::proofs_equal(p, store_auth::proof(kSecret + "x", store_auth::Role::client, kJob, nc, ns)));
  EXPECT_FALSE(store_auth::proofs_equal(p, store_auth::proof(kSecret, store_auth::Role::client, "other", nc, ns)));
  EXPECT_FALSE(store_auth::proofs_equal(p, store_auth::proof(kSecret, store_auth::Role::client, kJob, ns, nc)));
  EXPECT_FALSE(store_auth::proofs_equal(p, p.substr(1)));
  EXPECT_FALSE(store_auth::proofs_equal("", ""));
}

}  // namespace
}  // namespace tandem
