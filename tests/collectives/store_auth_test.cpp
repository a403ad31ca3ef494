// The store's job-secret handshake (collectives/store_auth.h) over real sockets: the
// right secret is let in; no secret, a wrong one, a replayed handshake, truncated or
// garbage frames, an old client, a half-finished handshake and a flood are refused,
// counted exactly, and never stop the server serving the job's own clients. No sleeps:
// every wait ends on an event (a reply, a close), bounded only against a hang.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

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

const std::string kSecret = "0123456789abcdef-the-job-secret";
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

// A raw client's handshake up to the challenge: returns (server nonce, server proof).
std::pair<std::string, std::string> challenge(int fd, const std::string& client_nonce) {
  raw_send(fd, hello_frame(kJob, client_nonce));
  const std::string body = read_reply(fd);
  EXPECT_FALSE(body.empty());
  if (body.empty()) return {};
  EXPECT_EQ(static_cast<Status>(body[0]), Status::challenge);
  store_wire::Reader in(std::string_view(body).substr(1));
  std::string nonce = in.str(64);
  std::string proof = in.str(64);
  EXPECT_TRUE(in.ok() && in.done());
  return {nonce, proof};
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

TEST_F(AuthFixture, WrongSecretIsRefusedOnBothSides) {
  // The client notices first: the store cannot prove the client's (wrong) secret.
  const std::string e = error_of(secret_client_options(server.port(), "a-wrong-secret-of-some-length"));
  EXPECT_NE(e.find("the store could not prove it knows the job secret"), std::string::npos) << e;
  // A client that sends its wrong proof anyway is told auth_failed and closed.
  const int fd = raw_connect(server.port());
  const std::string nonce(32, 'c');
  const auto [server_nonce, server_proof] = challenge(fd, nonce);
  raw_send(fd, proof_frame(store_auth::proof("a-wrong-secret-of-some-length", store_auth::Role::client, kJob, nonce,
                                             server_nonce)));
  const std::string reply = read_reply(fd);
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(static_cast<Status>(reply[0]), Status::auth_failed);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_clients(), 2);  // the first client closed before proving
  store.set("still", "serving");
  EXPECT_EQ(store.get("still", seconds(5)), "serving");
}

TEST_F(AuthFixture, TheServersProofIsRightAndFreshPerConnection) {
  const std::string nonce(32, 'c');
  const int a = raw_connect(server.port());
  const int b = raw_connect(server.port());
  const auto [nonce_a, proof_a] = challenge(a, nonce);
  const auto [nonce_b, proof_b] = challenge(b, nonce);
  EXPECT_EQ(nonce_a.size(), store_auth::kNonceBytes);
  EXPECT_NE(nonce_a, nonce_b);
  EXPECT_EQ(proof_a, store_auth::proof(kSecret, store_auth::Role::server, kJob, nonce, nonce_a));
  EXPECT_EQ(proof_b, store_auth::proof(kSecret, store_auth::Role::server, kJob, nonce, nonce_b));
  close(a);
  close(b);
}

TEST_F(AuthFixture, AReplayedHandshakeIsRefused) {
  // Record every byte a real client with the secret sends, and check it was let in.
  const std::string nonce = store_auth::random_bytes(32);
  std::string recorded = hello_frame(kJob, nonce);
  const int first = raw_connect(server.port());
  const auto [server_nonce, server_proof] = challenge(first, nonce);
  const std::string proof = proof_frame(store_auth::proof(kSecret, store_auth::Role::client, kJob, nonce, server_nonce));
  recorded += proof;
  raw_send(first, proof);
  const std::string ok = read_reply(first);
  ASSERT_EQ(ok.size(), 1u);
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
  EXPECT_EQ(store_wire::read_frame_length(reply.data() + 1), 3u);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_clients(), 1);
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
    const auto [server_nonce, server_proof] = challenge(fd, nonce);
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
  EXPECT_EQ(store_auth::secret_problem("short"), "it is 5 bytes long, shorter than the 16 bytes a secret needs");
  EXPECT_EQ(store_auth::secret_problem("0123456789abcdef\nsecond line"),
            "it contains a NUL, CR or LF byte (one secret on one line)");
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
  EXPECT_EQ(error_for({{"TANDEM_JOB_SECRET_FD", std::to_string(bad_fd)}}),
            "environment variable TANDEM_JOB_SECRET_FD=987654: cannot read the job secret: Bad file descriptor");
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
