// Fuzz target: the TCP store's wire protocol as the server sees it (collectives/store.h,
// collectives/store_protocol.h, collectives/store_auth.h). Two real StoreServers per process
// (127.0.0.1, port 0), one without a job secret and one with; each input is one client's
// byte stream. Byte 0: bits 0-5 the chunk size the rest is sent in (0: all at once); bit 7
// picks the server with the secret, where the stream is the hello, the proof and the rest
// (so the fuzzer exercises the challenge and the proof's parsing); bit 6 (with bit 7) has
// this harness pass the handshake first, with the right proof, so the stream is requests
// to an authenticated store. So every state of the handshake (no hello yet, challenged,
// greeted) gets every kind of frame; the seeds (make_seeds.py) start it with each message
// in each state and with lengths at and one past each limit (the longest hello, the
// pre-handshake frame cap, the general frame limit). Then (once the server has handled those bytes, see Barrier) the client
// half-closes and reads until the server closes. Contract checked:
// the server neither crashes (ASan, UBSan and aborts surface here: it runs in this process)
// nor keeps a connection whose client has finished; a malformed client is dropped, and a
// parked get/wait ends when its client goes away, whatever its timeout.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "collectives/store_protocol.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Far above any honest answer (the server reacts to EOF in one poll round), and far below
// libFuzzer's -timeout, so a server that keeps a finished client is reported as such.
constexpr auto kCloseDeadline = std::chrono::seconds(10);

// Blocks until `fd` has `n` bytes for `out`, or aborts after kCloseDeadline.
void read_exactly(int fd, char* out, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kCloseDeadline;
  size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (ms.count() <= 0) {
      std::fprintf(stderr, "store server did not answer num_keys within %lld s\n",
                   static_cast<long long>(kCloseDeadline.count()));
      std::abort();
    }
    if (poll(&pfd, 1, static_cast<int>(ms.count())) <= 0) continue;
    const ssize_t r = recv(fd, out + got, n - got, 0);
    FUZZ_CHECK(r > 0 || (r < 0 && errno == EINTR));
    if (r > 0) got += static_cast<size_t>(r);
  }
}

constexpr char kSecret[] = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
constexpr uint8_t kAuthenticated = 0x80;
constexpr uint8_t kHandshakeFirst = 0x40;

tandem::StoreServer& server(bool with_secret) {
  // Live until the process exits: one server serves every input, as one serves a job.
  static auto* open = [] {
    spdlog::set_level(spdlog::level::err);  // every dropped client would log a warning
    return new tandem::StoreServer({"127.0.0.1", 0, "fuzz"});
  }();
  static auto* secret = new tandem::StoreServer({"127.0.0.1", 0, "fuzz", kSecret});
  return with_secret ? *secret : *open;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {  // a signal may cut a send short, or interrupt it
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    FUZZ_CHECK(n > 0 || (n < 0 && errno == EINTR));
    if (n > 0) sent += static_cast<size_t>(n);
  }
}

// One reply frame's body (status byte first).
std::string read_frame(int fd) {
  char header[4];
  read_exactly(fd, header, 4);
  std::string body(tandem::store_wire::read_frame_length(header), '\0');
  FUZZ_CHECK(!body.empty() && body.size() < 4096);
  read_exactly(fd, body.data(), body.size());
  return body;
}

// A well-behaved client's handshake, with the job secret when `with_secret`.
void handshake(int fd, bool with_secret) {
  using namespace tandem::store_wire;
  namespace auth = tandem::store_auth;
  const std::string nonce(auth::kNonceBytes, 'n');
  send_all(fd, Writer().u32(kMagic).u32(kVersion).str("fuzz").str(nonce).frame());
  std::string reply = read_frame(fd);
  if (!with_secret) {
    FUZZ_CHECK(reply == std::string(1, '\0'));  // Status::ok
    return;
  }
  // Protocol 4: the challenge is a nonce alone; the store's proof comes with the ok.
  FUZZ_CHECK(static_cast<Status>(reply[0]) == Status::challenge);
  Reader in(std::string_view(reply).substr(1));
  const std::string server_nonce = in.str(auth::kNonceBytes);
  FUZZ_CHECK(in.ok() && in.done());
  send_all(fd, Writer().str(auth::proof(kSecret, auth::Role::client, "fuzz", nonce, server_nonce)).frame());
  reply = read_frame(fd);
  FUZZ_CHECK(static_cast<Status>(reply[0]) == Status::ok);
  Reader ok(std::string_view(reply).substr(1));
  const std::string server_proof = ok.str(auth::kProofBytes);
  FUZZ_CHECK(ok.ok() && ok.done());
  FUZZ_CHECK(auth::proofs_equal(server_proof, auth::proof(kSecret, auth::Role::server, "fuzz", nonce, server_nonce)));
}

int connect_client(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno == EINTR) {
    // A signal (libFuzzer's -timeout alarm) interrupted it: the connection goes on in the
    // background, so wait until it is writable and read how it ended (a CI run aborted here).
    pollfd pfd{fd, POLLOUT, 0};
    while ((rc = poll(&pfd, 1, -1)) < 0 && errno == EINTR) {
    }
    int error = 0;
    socklen_t len = sizeof(error);
    if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0) rc = error == 0 ? 0 : -1;
    if (error != 0) errno = error;
  }
  // Which failure it is (client ports used up, or the server gone) decides the fix.
  if (rc != 0) std::fprintf(stderr, "fuzz_store_server: connect to port %d: %s\n", port, std::strerror(errno));
  FUZZ_CHECK(rc == 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// A well-formed client of its own. The server reads and handles every client's bytes in
// rounds (one poll() each); the fuzzed client's bytes are all sent before the first of two
// num_keys round trips on this connection, and the second is read in a later round than
// the one that accepted the fuzzed client, so once it is answered the server has handled
// everything the fuzzed client sent (bytes that arrive together with the client's EOF are
// discarded unhandled: hence this barrier before the half-close).
class Barrier {
 public:
  Barrier(int port, bool with_secret) : fd_(connect_client(port)) { handshake(fd_, with_secret); }
  void round_trip() {
    using namespace tandem::store_wire;
    send_all(fd_, Writer().u8(static_cast<uint8_t>(Command::num_keys)).frame());
    char reply[13];  // length 9, Status::ok, i64
    read_exactly(fd_, reply, sizeof(reply));
    FUZZ_CHECK(reply[4] == 0);
  }

 private:
  int fd_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool with_secret = (data[0] & kAuthenticated) != 0;
  const int fd = connect_client(server(with_secret).port());
  if (with_secret && (data[0] & kHandshakeFirst)) handshake(fd, true);
  const size_t chunk = (data[0] & 0x3f) == 0 ? size : (data[0] & 0x3f);
  const uint8_t* p = data + 1;
  size_t left = size - 1;
  const auto deadline = std::chrono::steady_clock::now() + kCloseDeadline;
  bool half_closed = false;
  char sink[4096];
  for (;;) {
    // Write while there is input (replies are read meanwhile, so neither side's buffers fill).
    if (left == 0 && !half_closed) {
      static Barrier open_barrier(server(false).port(), false);
      static Barrier secret_barrier(server(true).port(), true);
      Barrier& barrier = with_secret ? secret_barrier : open_barrier;
      barrier.round_trip();
      barrier.round_trip();
      shutdown(fd, SHUT_WR);
      half_closed = true;
    }
    pollfd pfd{fd, static_cast<short>(POLLIN | (left > 0 ? POLLOUT : 0)), 0};
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (ms.count() <= 0) {
      std::fprintf(stderr, "store server kept the connection %lld s after the client finished sending\n",
                   static_cast<long long>(kCloseDeadline.count()));
      std::abort();
    }
    const int ready = poll(&pfd, 1, static_cast<int>(ms.count()));
    if (ready < 0 && errno == EINTR) continue;
    FUZZ_CHECK(ready >= 0);
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = recv(fd, sink, sizeof(sink), 0);
      if (n == 0) break;  // the server closed: done
      if (n < 0 && errno == ECONNRESET) break;  // dropped with unread input: done too
      if (n < 0 && errno == EPIPE) break;
      if (n < 0 && errno != EINTR && errno != EAGAIN) FUZZ_CHECK(!"recv failed");
    }
    if (left > 0 && (pfd.revents & POLLOUT)) {
      const ssize_t n = send(fd, p, std::min(left, chunk), MSG_NOSIGNAL);
      if (n > 0) {
        p += n;
        left -= static_cast<size_t>(n);
      } else if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        left = 0;  // the server dropped us mid-stream (malformed input): wait for EOF
      }
    }
  }
  // The server has closed or dropped us: abort the connection (RST) rather than leave it
  // in TIME_WAIT. At 2,500 inputs/s the client's TIME_WAIT sockets used up the
  // ephemeral ports and connect() failed after about 32,000 inputs (a CI run).
  linger abort_on_close{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  close(fd);
  return 0;
}
