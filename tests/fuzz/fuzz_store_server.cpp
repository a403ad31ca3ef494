// Fuzz target: the TCP store's wire protocol as the server sees it (collectives/store.h,
// collectives/store_protocol.h). One real StoreServer per process (127.0.0.1, port 0); each
// input is one client's byte stream: byte 0 picks the chunk size the rest is sent in (0: all
// at once), then (once the server has handled those bytes, see Barrier) the client
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

tandem::StoreServer& server() {
  // Lives until the process exits: one server serves every input, as one serves a job.
  static auto* s = [] {
    spdlog::set_level(spdlog::level::err);  // every dropped client would log a warning
    return new tandem::StoreServer({"127.0.0.1", 0, "fuzz"});
  }();
  return *s;
}

int connect_client(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
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
  explicit Barrier(int port) : fd_(connect_client(port)) {
    using namespace tandem::store_wire;
    send_all(Writer().u32(kMagic).u32(kVersion).str("fuzz").frame());
    char reply[5];
    read_exactly(fd_, reply, sizeof(reply));  // length 1, Status::ok
    FUZZ_CHECK(reply[4] == 0);
  }
  void round_trip() {
    using namespace tandem::store_wire;
    send_all(Writer().u8(static_cast<uint8_t>(Command::num_keys)).frame());
    char reply[13];  // length 9, Status::ok, i64
    read_exactly(fd_, reply, sizeof(reply));
    FUZZ_CHECK(reply[4] == 0);
  }

 private:
  void send_all(const std::string& bytes) {
    FUZZ_CHECK(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }
  int fd_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int fd = connect_client(server().port());
  const size_t chunk = data[0] == 0 ? size : data[0];
  const uint8_t* p = data + 1;
  size_t left = size - 1;
  const auto deadline = std::chrono::steady_clock::now() + kCloseDeadline;
  bool half_closed = false;
  char sink[4096];
  for (;;) {
    // Write while there is input (replies are read meanwhile, so neither side's buffers fill).
    if (left == 0 && !half_closed) {
      static Barrier barrier(server().port());
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
