// The store client (TcpStore) and the key-prefixing view (PrefixStore).
// Invariant: every socket operation runs against a deadline (poll before each read
// and write), so no call can hang; a failed or timed-out exchange closes the
// connection, since a late reply would otherwise be read as the next call's answer.
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "collectives/store_protocol.h"
#include "collectives/untrusted_text.h"

namespace tandem {

using namespace store_wire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  const size_t shown = std::min<size_t>(keys.size(), 16);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > shown) s += " and " + std::to_string(keys.size() - shown) + " more";
  return s;
}

int64_t ms_left(Clock::time_point deadline) {
  return std::max<int64_t>(0, std::chrono::ceil<milliseconds>(deadline - Clock::now()).count());
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int64_t left = ms_left(deadline);
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    if (rc == 0 && left == 0) return false;
  }
}

// Empty string on success, else why it failed.
std::string send_all(int fd, std::string_view data, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return "timed out sending";
    } else {
      return std::string("send failed: ") + strerror(errno);
    }
  }
  return {};
}

std::string recv_all(int fd, char* out, size_t len, Clock::time_point deadline) {
  size_t got = 0;
  while (got < len) {
    const ssize_t n = recv(fd, out + got, len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      return "the store closed the connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline)) return "timed out waiting for the reply";
    } else {
      return std::string("recv failed: ") + strerror(errno);
    }
  }
  return {};
}

// One non-blocking connect attempt to any address of host:port; -1 and `error` on failure.
int try_connect(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_str = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &found); rc != 0) {
    error = std::string("cannot resolve host: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      if (wait_fd(fd, POLLOUT, attempt_deadline)) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) break;
    error = strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

struct TcpStore::Reply {
  Status status = Status::ok;
  std::string body;  // after the status byte
};

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  const auto deadline = Clock::now() + options_.connect_timeout;
  std::string error = "no attempt made";
  int cut_off = 0;  // handshakes the store closed before answering
  auto backoff = milliseconds(10);
  // The server may not be up yet (rank 0 or the launcher starts it), and a store flooded
  // with strangers' connections drops pending handshakes (pending_handshakes.h): retry
  // until the deadline, backing off so a crowd of ranks does not spin on the listener.
  for (;;) {
    fd_ = try_connect(options_.host, options_.port, deadline, error);
    if (fd_ >= 0) {
      try {
        handshake();
        return;
      } catch (const StoreError& e) {
        if (fd_ >= 0) {  // the store answered, and refused: retrying cannot help
          close(fd_);
          fd_ = -1;
          throw;
        }
        error = e.what();  // call() closed the connection: it broke before any answer
        ++cut_off;
      }
    }
    if (Clock::now() + backoff >= deadline) {
      std::string why = cut_off == 0 ? error
                                     : "the store closed the connection during the handshake " + std::to_string(cut_off) +
                                           " time" + (cut_off == 1 ? "" : "s") +
                                           " (a store drops pending handshakes beyond 256: a flood of connections "
                                           "to its port?); last: " + error;
      throw StoreUnreachable("cannot connect to " + describe() + " within " +
                             std::to_string(options_.connect_timeout.count()) + " ms: " + why);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(500));
  }
}

void TcpStore::handshake() {
  const std::string client_nonce = store_auth::random_bytes(store_auth::kNonceBytes);
  Writer hello;
  hello.u32(kMagic).u32(kVersion).str(options_.job_id).str(client_nonce);
  Reply r = call(hello.frame(), options_.op_timeout, "handshake");
  Reader in(r.body);
  if (r.status == Status::wrong_job) {
    throw StoreError("store at " + options_.host + ":" + std::to_string(options_.port) + " serves another job, not " +
                     options_.job_id);
  }
  if (r.status == Status::bad_version) {
    throw StoreError(describe() + ": handshake refused (protocol version mismatch: client " +
                     std::to_string(kVersion) + ", server " + std::to_string(in.u32()) + ")");
  }
  if (r.status == Status::ok) {
    if (options_.secret.empty()) return;
    throw StoreError(describe() + ": the store does not ask for the job secret, but this process has one: "
                     "it is not this job's store, or it was started without the secret");
  }
  if (r.status != Status::challenge) {
    throw StoreError(describe() + ": unexpected reply " + std::to_string(static_cast<int>(r.status)) +
                     " to the handshake");
  }
  const std::string server_nonce = in.str(store_auth::kNonceBytes);
  if (!in.ok() || !in.done() || server_nonce.size() != store_auth::kNonceBytes) {
    throw StoreError(describe() + ": malformed challenge in the handshake");
  }
  // This process proves first (store_auth.h); empty: no secret, which the store refuses (and logs).
  Writer answer;
  answer.str(options_.secret.empty() ? std::string()
                                     : store_auth::proof(options_.secret, store_auth::Role::client, options_.job_id,
                                                         client_nonce, server_nonce));
  r = call(answer.frame(), options_.op_timeout, "handshake");
  if (r.status == Status::ok) {
    Reader verdict(r.body);
    const std::string server_proof = verdict.str(store_auth::kProofBytes);
    const std::string expected = store_auth::proof(options_.secret, store_auth::Role::server, options_.job_id,
                                                   client_nonce, server_nonce);
    if (!verdict.ok() || !verdict.done() || !store_auth::proofs_equal(expected, server_proof)) {
      throw StoreError(describe() + ": the store could not prove it knows the job secret: this process's "
                       "secret differs from the store's, or another program is listening on this port");
    }
    return;
  }
  if (options_.secret.empty()) {
    throw StoreError(describe() + ": the store requires the job secret, which this process lacks (set "
                     "TANDEM_JOB_SECRET_FILE, or give tandemrun --job-secret-file; a program that a script started under "
                     "tandemrun needs tandemrun --pass-job-secret; see docs/security.md)");
  }
  throw StoreError(describe() + ": the store refused this process's proof of the job secret: this process's "
                   "secret differs from the store's");
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

std::string TcpStore::describe() const {
  return "store at " + options_.host + ":" + std::to_string(options_.port) + " (job " +
         options_.job_id + ")";
}

std::string TcpStore::local_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = addr.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
                                               : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
  if (!inet_ntop(addr.ss_family, raw, text, sizeof(text))) return {};
  return text;
}

std::shared_ptr<Store> TcpStore::clone(milliseconds timeout) const {
  TcpStoreOptions o = options_;
  o.connect_timeout = timeout;
  o.op_timeout = timeout;
  return std::make_shared<TcpStore>(o);
}

TcpStore::Reply TcpStore::call(const std::string& request, milliseconds deadline_after,
                               const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) throw StoreError(describe() + ": " + what + ": the connection was closed by an earlier failure");
  // Capped (about 35 years) so that adding it to the clock cannot overflow.
  const auto deadline = Clock::now() + std::min(deadline_after, milliseconds(int64_t{1} << 40));
  std::string error = send_all(fd_, request, deadline);
  char header[4];
  if (error.empty()) error = recv_all(fd_, header, 4, deadline);
  Reply r;
  if (error.empty()) {
    const uint32_t len = read_frame_length(header);
    if (len == 0 || len > StoreLimits::kMaxFrameBytes) {
      error = "malformed reply of " + std::to_string(len) + " bytes";
    } else {
      std::string body(len, '\0');
      error = recv_all(fd_, body.data(), len, deadline);
      r.status = static_cast<Status>(static_cast<uint8_t>(body[0]));
      r.body = body.substr(1);
    }
  }
  if (!error.empty()) {
    close(fd_);
    fd_ = -1;
    throw StoreError(describe() + ": " + what + ": " + error);
  }
  if (r.status == Status::error) {
    Reader in(r.body);
    // The store's words, escaped: without a job secret any program on that port may have answered.
    throw StoreError(describe() + ": " + escape_untrusted(in.str(StoreLimits::kMaxValueBytes), kUntrustedMessageBytes));
  }
  return r;
}

void TcpStore::set(const std::string& key, std::string_view value) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::set)).str(key).str(value);
  call(w.frame(), options_.op_timeout, ("set '" + key + "'").c_str());
}

std::string TcpStore::get(const std::string& key, milliseconds timeout) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::get)).str(key).i64(std::max<int64_t>(timeout.count(), 0));
  // The server answers "timeout" itself at the deadline; ours allows for a slow reply.
  Reply r = call(w.frame(), timeout + options_.op_timeout, ("get '" + key + "'").c_str());
  if (r.status == Status::timeout) {
    throw StoreTimeout(describe() + ": timed out after " + std::to_string(timeout.count()) +
                           " ms waiting for key '" + key + "'",
                       {key});
  }
  Reader in(r.body);
  return in.str(StoreLimits::kMaxValueBytes);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  try {
    return get(key, milliseconds(0));
  } catch (const StoreTimeout&) {
    return std::nullopt;
  }
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  if (keys.empty()) return;
  Writer w;
  w.u8(static_cast<uint8_t>(Command::wait)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(std::max<int64_t>(timeout.count(), 0));
  Reply r = call(w.frame(), timeout + options_.op_timeout, "wait");
  if (r.status == Status::timeout) {
    Reader in(r.body);
    std::vector<std::string> absent(in.u32());
    for (auto& k : absent) k = in.str(StoreLimits::kMaxKeyBytes);
    throw StoreTimeout(describe() + ": timed out after " + std::to_string(timeout.count()) +
                           " ms waiting for keys " + join_keys(keys) + " (still missing: " +
                           join_keys(absent) + ")",
                       absent);
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::add)).str(key).i64(delta);
  Reply r = call(w.frame(), options_.op_timeout, ("add '" + key + "'").c_str());
  Reader in(r.body);
  return in.i64();
}

std::string TcpStore::compare_set(const std::string& key, std::string_view expected,
                                  std::string_view desired) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::compare_set)).str(key).str(expected).str(desired);
  Reply r = call(w.frame(), options_.op_timeout, ("compare_set '" + key + "'").c_str());
  Reader in(r.body);
  return in.str(StoreLimits::kMaxValueBytes);
}

bool TcpStore::delete_key(const std::string& key) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::delete_key)).str(key);
  Reply r = call(w.frame(), options_.op_timeout, ("delete '" + key + "'").c_str());
  Reader in(r.body);
  return in.u8() != 0;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::check)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  Reply r = call(w.frame(), options_.op_timeout, "check");
  Reader in(r.body);
  return in.u8() != 0;
}

int64_t TcpStore::num_keys() {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::num_keys));
  Reply r = call(w.frame(), options_.op_timeout, "num_keys");
  Reader in(r.body);
  return in.i64();
}

// ---- PrefixStore ----

std::vector<std::optional<AgedValue>> TcpStore::read_aged(const std::vector<std::string>& keys) {
  Writer w;
  w.u8(static_cast<uint8_t>(Command::read_aged)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  Reply r = call(w.frame(), options_.op_timeout, "read_aged");
  Reader in(r.body);
  const uint32_t n = in.u32();
  if (!in.ok() || n != keys.size()) throw StoreError(describe() + ": read_aged: malformed reply");
  std::vector<std::optional<AgedValue>> out(n);
  for (auto& v : out) {
    if (in.u8() == 0) continue;
    AgedValue a;
    a.value = in.str(StoreLimits::kMaxValueBytes);
    a.age = milliseconds(in.i64());
    v = std::move(a);
  }
  if (!in.ok()) throw StoreError(describe() + ": read_aged: malformed reply");
  return out;
}

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

StoreTimeout PrefixStore::unprefixed(const StoreTimeout& e) const {
  std::vector<std::string> keys;
  for (const auto& k : e.missing_keys) {
    keys.push_back(k.rfind(prefix_, 0) == 0 ? k.substr(prefix_.size()) : k);
  }
  return StoreTimeout(e.what(), std::move(keys));
}

void PrefixStore::set(const std::string& key, std::string_view value) { base_->set(prefix_ + key, value); }

std::string PrefixStore::get(const std::string& key, milliseconds timeout) {
  try {
    return base_->get(prefix_ + key, timeout);
  } catch (const StoreTimeout& e) {
    throw unprefixed(e);
  }
}

std::optional<std::string> PrefixStore::try_get(const std::string& key) {
  return base_->try_get(prefix_ + key);
}

void PrefixStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  try {
    base_->wait(prefixed(keys), timeout);
  } catch (const StoreTimeout& e) {
    throw unprefixed(e);
  }
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(prefix_ + key, delta); }

std::string PrefixStore::compare_set(const std::string& key, std::string_view expected,
                                     std::string_view desired) {
  return base_->compare_set(prefix_ + key, expected, desired);
}

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(prefix_ + key); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(prefixed(keys)); }

std::shared_ptr<Store> PrefixStore::clone(milliseconds timeout) const {
  return std::make_shared<PrefixStore>(prefix_, base_->clone(timeout));
}

}  // namespace tandem
