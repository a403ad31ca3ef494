// A stranger at the job's store, for the store-authentication tests (test_launcher.py,
// auth_*): it connects to a running job's store over real sockets and tries to get in.
//
//   store-intruder --port P --job-id ID --mode MODE [--secret-file F]
//
// Modes (each prints one "PEER <local address> <outcome>" line per connection, the
// address the store logs, so the test can find the store's line about it):
//   no-secret      a real client (TcpStore) that knows the job id but has no secret
//   wrong-secret   hello, then a proof made with a wrong secret
//   replay         with the real secret (--secret-file), one real handshake whose bytes
//                  are recorded, then those bytes sent again on a new connection
//   half-open      hello, the challenge read, then nothing; waits (bounded) for the store
//                  to close the connection at its handshake deadline
//   flood:N        N connections with a wrong proof, one after another
// Exit 0 when every attempt was refused as expected, 1 otherwise, 2 on bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "collectives/store_protocol.h"

namespace {

using namespace tandem;
using store_wire::Status;

struct Args {
  int port = 0;
  std::string job;
  std::string mode;
  std::string secret_file;
};

int connect_store(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "store-intruder: cannot connect to port %d: %s\n", port, std::strerror(errno));
    std::exit(1);
  }
  timeval tv{60, 0};  // only against a hang: the store answers or closes long before
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

std::string local_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &addr.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(addr.sin_port));
}

void send_bytes(int fd, const std::string& bytes) {
  if (send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    std::fprintf(stderr, "store-intruder: send failed: %s\n", std::strerror(errno));
    std::exit(1);
  }
}

// One reply's body (status first); empty when the store closed the connection.
std::string read_reply(int fd) {
  char header[4];
  if (recv(fd, header, 4, MSG_WAITALL) != 4) return {};
  std::string body(store_wire::read_frame_length(header), '\0');
  if (body.empty() || recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size())) return {};
  return body;
}

std::string hello(const Args& a, const std::string& nonce) {
  store_wire::Writer w;
  w.u32(store_wire::kMagic).u32(store_wire::kVersion).str(a.job).str(nonce);
  return w.frame();
}

std::string proof_frame(const std::string& proof) {
  store_wire::Writer w;
  w.str(proof);
  return w.frame();
}

// The server nonce of a challenge, or empty if the reply was not one.
std::string server_nonce_of(const std::string& reply) {
  if (reply.empty() || static_cast<Status>(reply[0]) != Status::challenge) return {};
  store_wire::Reader in(std::string_view(reply).substr(1));
  return in.str(store_auth::kNonceBytes);
}

// True when the store answered `proof` with auth_failed and closed.
bool proof_refused(int fd, const std::string& proof) {
  send_bytes(fd, proof);
  const std::string reply = read_reply(fd);
  const bool refused = reply.size() == 1 && static_cast<Status>(reply[0]) == Status::auth_failed;
  return refused && read_reply(fd).empty();
}

bool wrong_secret(const Args& a) {
  const int fd = connect_store(a.port);
  const std::string nonce = store_auth::random_bytes(store_auth::kNonceBytes);
  send_bytes(fd, hello(a, nonce));
  const std::string server_nonce = server_nonce_of(read_reply(fd));
  const bool refused = !server_nonce.empty() &&
                       proof_refused(fd, proof_frame(store_auth::proof("not-the-job-secret-at-all", store_auth::Role::client,
                                                                       a.job, nonce, server_nonce)));
  std::printf("PEER %s %s\n", local_address(fd).c_str(), refused ? "refused" : "ACCEPTED");
  close(fd);
  return refused;
}

bool replay(const Args& a) {
  const std::string secret = store_auth::read_secret_file(a.secret_file, "--secret-file " + a.secret_file);
  // A real handshake, recorded.
  const int real = connect_store(a.port);
  const std::string nonce = store_auth::random_bytes(store_auth::kNonceBytes);
  std::string recorded = hello(a, nonce);
  send_bytes(real, recorded);
  const std::string server_nonce = server_nonce_of(read_reply(real));
  const std::string proof =
      proof_frame(store_auth::proof(secret, store_auth::Role::client, a.job, nonce, server_nonce));
  recorded += proof;
  send_bytes(real, proof);
  const std::string ok = read_reply(real);
  const bool recorded_ok = !ok.empty() && static_cast<Status>(ok[0]) == Status::ok;  // with the store's proof
  std::printf("PEER %s %s\n", local_address(real).c_str(), recorded_ok ? "recorded" : "NOT-ACCEPTED");
  close(real);
  // The same bytes again.
  const int again = connect_store(a.port);
  send_bytes(again, recorded);
  const bool challenged = !server_nonce_of(read_reply(again)).empty();
  const std::string verdict = read_reply(again);
  const bool refused = challenged && verdict.size() == 1 && static_cast<Status>(verdict[0]) == Status::auth_failed;
  std::printf("PEER %s %s\n", local_address(again).c_str(), refused ? "refused" : "ACCEPTED");
  close(again);
  return recorded_ok && refused;
}

bool half_open(const Args& a) {
  const int fd = connect_store(a.port);
  send_bytes(fd, hello(a, store_auth::random_bytes(store_auth::kNonceBytes)));
  const bool challenged = !server_nonce_of(read_reply(fd)).empty();
  std::printf("PEER %s held\n", local_address(fd).c_str());
  std::fflush(stdout);
  char byte;
  const ssize_t n = recv(fd, &byte, 1, 0);  // EOF (0) or a reset when the store drops us
  const bool dropped = n == 0 || (n < 0 && errno == ECONNRESET);
  std::printf("PEER %s %s\n", local_address(fd).c_str(), dropped ? "dropped" : "STILL-OPEN");
  close(fd);
  return challenged && dropped;
}

bool no_secret(const Args& a) {
  TcpStoreOptions o;
  o.port = a.port;
  o.job_id = a.job;
  o.connect_timeout = std::chrono::seconds(30);
  try {
    TcpStore store(o);
    std::printf("PEER ? ACCEPTED\n");
    return false;
  } catch (const StoreError& e) {
    // The store logs this client's address; TcpStore keeps its socket to itself, so the
    // test matches the store's line by the reason instead.
    std::printf("PEER ? refused: %s\n", e.what());
    return std::string(e.what()).find("requires the job secret") != std::string::npos;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port") a.port = std::atoi(value.c_str());
    else if (flag == "--job-id") a.job = value;
    else if (flag == "--mode") a.mode = value;
    else if (flag == "--secret-file") a.secret_file = value;
  }
  if (a.port <= 0 || a.job.empty() || a.mode.empty()) {
    std::fprintf(stderr, "usage: store-intruder --port P --job-id ID --mode MODE [--secret-file F]\n");
    return 2;
  }
  bool ok = false;
  try {
    if (a.mode == "no-secret") {
      ok = no_secret(a);
    } else if (a.mode == "wrong-secret") {
      ok = wrong_secret(a);
    } else if (a.mode == "replay") {
      ok = replay(a);
    } else if (a.mode == "half-open") {
      ok = half_open(a);
    } else if (a.mode.rfind("flood:", 0) == 0) {
      const int n = std::atoi(a.mode.c_str() + 6);
      int refused = 0;
      for (int i = 0; i < n; ++i) refused += wrong_secret(a);
      std::printf("flood: %d of %d refused\n", refused, n);
      ok = n > 0 && refused == n;
    } else {
      std::fprintf(stderr, "store-intruder: unknown mode '%s'\n", a.mode.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store-intruder: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
