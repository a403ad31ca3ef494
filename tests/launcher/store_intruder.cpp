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
//   forge          a hello whose job id is a forged tandemrun line ("\ntandemrun: job failed:
//                  rank 1 was killed") wrapped in terminal escape sequences; refused as
//                  another job's
//   half-open      hello, the challenge read, then nothing; waits (bounded) for the store
//                  to close the connection at its handshake deadline
//   flood:N        N connections with a wrong proof, one after another
//   frames:N:B     N connections that each declare a B-byte frame before any handshake and
//                  send as much of it as the store takes (B - 1 bytes at most), then one
//                  connection whose wrong-job hello is answered: the store has read every
//                  earlier byte by then (it reads every readable connection each round).
//                  Prints "frames: N sent, D closed by the store" and "HOLDING", keeps the
//                  connections until its standard input ends, and exits 0.
//   frames:N:B:closed  the same, but first waits (bounded) for the store to close each one:
//                  for a frame longer than the store lets a stranger send, D is N
//   storm          connections as fast as it can, each sending a hello of the job and
//                  leaving its handshake pending (at most 512 open; the oldest closed),
//                  until its standard input ends or 120 s pass; prints "STORMING" after
//                  the first and "storm: N connections" at the end, exits 0
// Exit 0 when every attempt was refused as expected, 1 otherwise, 2 on bad usage.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

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

bool forge(const Args& a) {
  Args forged = a;
  forged.job = "x\ntandemrun: job failed: rank 1 was killed\x1b[2J\x1b]0;owned\x07";
  const int fd = connect_store(a.port);
  send_bytes(fd, hello(forged, store_auth::random_bytes(store_auth::kNonceBytes)));
  const std::string reply = read_reply(fd);
  const bool refused = reply.size() == 1 && static_cast<Status>(reply[0]) == Status::wrong_job;
  std::printf("PEER %s %s\n", local_address(fd).c_str(), refused ? "refused" : "ACCEPTED");
  close(fd);
  return refused;
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

// True once standard input has ended (the test closed its end), without blocking.
bool input_ended() {
  pollfd p{0, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char buf[64];
  return read(0, buf, sizeof(buf)) <= 0;
}

void wait_for_input_end() {
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
}

// True when the store has closed `fd` (EOF or a reset), without blocking.
bool closed_now(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

bool frames(const Args& a, int n, uint32_t declared, bool wait_closed) {
  std::vector<int> fds;
  const std::string body(std::min<uint32_t>(declared - 1, 1u << 20), 'x');
  for (int i = 0; i < n; ++i) {
    const int fd = connect_store(a.port);
    fds.push_back(fd);
    std::string header(4, '\0');
    for (int k = 0; k < 4; ++k) header[k] = static_cast<char>((declared >> (8 * k)) & 0xff);
    if (send(fd, header.data(), 4, MSG_NOSIGNAL) != 4) continue;
    // The body in 1 MiB pieces, without blocking: what the store does not take stays unsent.
    for (uint32_t sent = 0; sent + 1 < declared;) {
      const size_t want = std::min<size_t>(body.size(), declared - 1 - sent);
      const ssize_t k = send(fd, body.data(), want, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k <= 0) break;
      sent += static_cast<uint32_t>(k);
    }
  }
  // A round trip on one more connection: the store has handled every byte sent before it.
  const int sync = connect_store(a.port);
  store_wire::Writer w;
  w.u32(store_wire::kMagic).u32(store_wire::kVersion).str(a.job + "-not").str(std::string(store_auth::kNonceBytes, 's'));
  send_bytes(sync, w.frame());
  const bool answered = !read_reply(sync).empty();
  close(sync);
  int closed = 0;
  for (int fd : fds) {
    if (!wait_closed) {
      closed += closed_now(fd);
      continue;
    }
    char byte;
    const ssize_t k = recv(fd, &byte, 1, 0);  // SO_RCVTIMEO bounds it (connect_store)
    closed += k == 0 || (k < 0 && errno == ECONNRESET);
  }
  std::printf("frames: %d sent, %d closed by the store\nHOLDING\n", n, closed);
  std::fflush(stdout);
  wait_for_input_end();
  for (int fd : fds) close(fd);
  return answered;
}

bool storm(const Args& a) {
  std::deque<int> open;
  long made = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string hello_bytes = hello(a, std::string(store_auth::kNonceBytes, 'f'));
  for (long tries = 1; std::chrono::steady_clock::now() < until && !(tries % 64 == 0 && input_ended()); ++tries) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(a.port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {  // a full backlog: go on
      close(fd);
      continue;
    }
    send(fd, hello_bytes.data(), hello_bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (made++ == 0) {
      std::printf("STORMING\n");
      std::fflush(stdout);
    }
    open.push_back(fd);
    if (open.size() > 512) {
      close(open.front());
      open.pop_front();
    }
  }
  for (int fd : open) close(fd);
  std::printf("storm: %ld connections\n", made);
  return made > 0;
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
    } else if (a.mode == "forge") {
      ok = forge(a);
    } else if (a.mode == "half-open") {
      ok = half_open(a);
    } else if (a.mode.rfind("flood:", 0) == 0) {
      const int n = std::atoi(a.mode.c_str() + 6);
      int refused = 0;
      for (int i = 0; i < n; ++i) refused += wrong_secret(a);
      std::printf("flood: %d of %d refused\n", refused, n);
      ok = n > 0 && refused == n;
    } else if (a.mode.rfind("frames:", 0) == 0) {
      int n = 0;
      unsigned long declared = 0;
      char tail[16] = "";
      const int got = std::sscanf(a.mode.c_str(), "frames:%d:%lu:%15s", &n, &declared, tail);
      if (got < 2 || n <= 0 || declared < 2 || declared > 0xffffffffUL || (got == 3 && std::strcmp(tail, "closed"))) {
        std::fprintf(stderr, "store-intruder: frames:N:BYTES[:closed] needs N > 0 and 2 <= BYTES < 2^32\n");
        return 2;
      }
      ok = frames(a, n, static_cast<uint32_t>(declared), got == 3);
    } else if (a.mode == "storm") {
      ok = storm(a);
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
