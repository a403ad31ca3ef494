// The store server: one background thread, poll() over non-blocking sockets.
// Invariants: the thread never blocks on one client (reads and writes are
// non-blocking, each poll round reads a bounded amount per client); a frame longer
// than kMaxFrameBytes, a body that does not parse, a bad magic number, another job's
// id, a failed job-secret proof, a handshake unfinished at its deadline, or replies
// piling up unread drop only that client. Blocking gets and waits are parked as
// waiters and answered when their keys appear or their deadline passes. Refused
// handshakes are logged with the peer's address, a few a window and then as a count
// (refusal_log.h), so a flood of them cannot flood the log. The handshake itself is in
// store_server_auth.cpp.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <spdlog/spdlog.h>

#include "collectives/store_auth.h"
#include "collectives/store_server_impl.h"
#include "collectives/untrusted_text.h"

namespace tandem {

using namespace store_wire;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// Before its handshake is over a connection is a stranger's: its frames may be only as long
// as a hello (magic, version, a job id of at most kMaxKeyBytes, a nonce) or a proof need,
// and it may have no more than one such frame buffered, so each stranger costs the store a
// few KiB at most, whatever it declares (docs/security.md).
constexpr size_t kMaxHandshakeFrameBytes = 4 + 4 + 4 + StoreLimits::kMaxKeyBytes + 4 + store_auth::kNonceBytes;
constexpr size_t kMaxHandshakeBuffered = 4 + kMaxHandshakeFrameBytes;
constexpr size_t kMaxReadPerRound = 4 * 1024 * 1024;  // fairness between clients
constexpr int kMaxAcceptsPerRound = 64;
constexpr size_t kMaxPendingOutput = 2 * StoreLimits::kMaxFrameBytes;
constexpr uint32_t kMaxKeysPerRequest = 1 << 20;
// A longer wait is capped here (about 35 years), so adding it to the clock cannot
// overflow whatever a client sends.
constexpr int64_t kMaxWaitMs = int64_t{1} << 40;

std::string peer_name(const sockaddr_storage& addr) {
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&addr), sizeof(addr), host, sizeof(host), port,
              sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

}  // namespace

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  const std::string where = "port " + std::to_string(s.options.port) + " on " + s.options.bind_addr;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_str = std::to_string(s.options.port);
  if (int rc = getaddrinfo(s.options.bind_addr.c_str(), port_str.c_str(), &hints, &found); rc != 0) {
    throw StoreError("store server: cannot resolve bind address '" + s.options.bind_addr +
                     "': " + gai_strerror(rc));
  }
  s.listen_fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) {
    freeaddrinfo(found);
    throw StoreError("store server: socket() failed: " + std::string(strerror(errno)));
  }
  // SO_REUSEADDR lets a restarted job rebind a port still in TIME_WAIT; a port that
  // another socket is listening on still fails with EADDRINUSE below.
  int one = 1;
  setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int bound = bind(s.listen_fd, found->ai_addr, found->ai_addrlen);
  const int bind_errno = errno;
  freeaddrinfo(found);
  if (bound != 0 || listen(s.listen_fd, 1024) != 0) {
    const int err = bound != 0 ? bind_errno : errno;
    close(s.listen_fd);
    if (err == EADDRINUSE) {
      throw StoreError(where + " is in use (pick another MASTER_PORT, or 0 for a free one)");
    }
    throw StoreError("store server: cannot listen on " + where + ": " + strerror(err));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  s.port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (pipe2(s.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    close(s.listen_fd);
    throw StoreError("store server: pipe2() failed: " + std::string(strerror(errno)));
  }
  s.thread = std::thread([&s] { s.run(); });
}

StoreServer::~StoreServer() {
  Impl& s = *impl_;
  s.stop = true;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = write(s.wake[1], &byte, 1);
  s.thread.join();
  s.refusal_log.flush();
  for (auto& [id, c] : s.clients) {
    if (!c.dead) close(c.fd);
  }
  close(s.listen_fd);
  close(s.wake[0]);
  close(s.wake[1]);
}

int StoreServer::port() const { return impl_->port; }
const StoreServerOptions& StoreServer::options() const { return impl_->options; }
int64_t StoreServer::dropped_clients() const { return impl_->dropped.load(); }
int64_t StoreServer::refused_clients() const { return impl_->refused.load(); }

Clock::time_point StoreServer::Impl::next_deadline() const {
  auto next = Clock::time_point::max();
  for (const Waiter& w : waiters) next = std::min(next, w.deadline);
  if (const auto handshake = pending.next_deadline()) next = std::min(next, *handshake);
  return next;
}

void StoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop) {
    fds.clear();
    ids.clear();
    fds.push_back({wake[0], POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (auto& [id, c] : clients) {
      short events = 0;
      if (!c.close_after_flush) events |= POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    int timeout_ms = -1;
    if (const auto next = next_deadline(); next != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      spdlog::error("store server: poll() failed: {}", strerror(errno));
      return;
    }
    if (fds[0].revents) {
      char buf[64];
      while (read(wake[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (stop) return;
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 2; i < fds.size(); ++i) {
      auto it = clients.find(ids[i - 2]);
      if (it == clients.end() || it->second.dead) continue;
      Client& c = it->second;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_client(it->first, c);
      if (!c.dead && (fds[i].revents & POLLOUT)) flush(c);
    }
    while (!runnable.empty()) {
      const uint64_t id = runnable.front();
      runnable.pop_front();
      process(id);
    }
    expire_waiters();
    expire_handshakes();
    while (!runnable.empty()) {  // expired waiters unblock clients with queued requests
      const uint64_t id = runnable.front();
      runnable.pop_front();
      process(id);
    }
    for (auto it = clients.begin(); it != clients.end();) {
      if (!it->second.dead) {
        ++it;
        continue;
      }
      pending.remove(it->first);
      it = clients.erase(it);
    }
  }
}

void StoreServer::Impl::accept_clients() {
  // A bounded batch per round, so a flood of connections cannot keep the thread from
  // serving the job's clients: the rest wait in the backlog for the next round.
  for (int accepted = 0; accepted < kMaxAcceptsPerRound; ++accepted) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll again
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Client c;
    c.id = next_client;
    c.fd = fd;
    c.peer = peer_name(addr);
    c.address = address_key(&addr);
    c.accepted = Clock::now();
    const uint64_t id = next_client++;
    const auto victim = pending.add(id, c.address, c.accepted + options.handshake_timeout);
    clients.emplace(id, std::move(c));
    if (victim) evict_pending(*victim);
  }
}

// The longest frame this client may send now: a handshake's until it has finished one.
size_t StoreServer::Impl::frame_limit(const Client& c) const {
  return c.greeted ? StoreLimits::kMaxFrameBytes : kMaxHandshakeFrameBytes;
}

// Why a frame this client declared `len` bytes long is refused; empty if it is not.
std::string StoreServer::Impl::oversized(const Client& c, uint32_t len) const {
  if (len <= frame_limit(c)) return {};
  return "frame of " + std::to_string(len) + " bytes exceeds the limit" +
         (c.greeted ? "" : " of " + std::to_string(kMaxHandshakeFrameBytes) + " bytes before the handshake is over");
}

void StoreServer::Impl::read_client(uint64_t id, Client& c) {
  size_t total = 0;
  char buf[kReadChunk];
  while (total < kMaxReadPerRound) {
    // A stranger's reads stop at what one handshake frame can need, so what it sends
    // beyond that is never buffered.
    // (One byte past the cap is read, so a stranger that sends more is seen and dropped.)
    const size_t stranger_room = kMaxHandshakeBuffered + 1 - std::min(c.in.size(), kMaxHandshakeBuffered);
    const size_t room = c.greeted ? sizeof(buf) : std::min(sizeof(buf), stranger_room);
    const ssize_t n = recv(c.fd, buf, room, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      // Check the declared length as soon as it is known, so an oversized frame is
      // refused before its body is buffered.
      if (!c.blocked && c.in.size() >= 4) {
        if (std::string why = oversized(c, read_frame_length(c.in.data())); !why.empty()) {
          drop(c, why);
          return;
        }
      }
      // A client sends its hello, or its proof, and waits for the answer: one that sends
      // more before the handshake is over is not following the protocol.
      if (!c.greeted && c.in.size() > kMaxHandshakeBuffered) {
        drop(c, "it sent more than a handshake frame before the handshake was over");
        return;
      }
      if (c.blocked && c.in.size() > StoreLimits::kMaxFrameBytes) {
        drop(c, "it keeps sending while its request is parked");
        return;
      }
      continue;
    }
    if (n == 0) {
      // Orderly close by the client. Requests that arrived with the close still count
      // (a client may send a set and close at once); their replies go out if the client
      // only half-closed. A wait it leaves parked is given up with it.
      if (!c.blocked) process(id);
      if (!c.dead && !c.greeted && !c.close_after_flush) {
        drop(c, c.challenged ? "it closed the connection before proving the job secret"
                             : "it closed the connection during the handshake");
      }
      if (!c.dead) {
        c.dead = true;
        close(c.fd);
      }
      std::erase_if(waiters, [id](const Waiter& w) { return w.client == id; });
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    drop(c, std::string("recv failed: ") + strerror(errno));
    return;
  }
  if (!c.blocked) runnable.push_back(id);
}

void StoreServer::Impl::flush(Client& c) {
  size_t sent = 0;
  while (sent < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      c.out.clear();
      c.dead = true;
      close(c.fd);
      return;
    }
  }
  c.out.erase(0, sent);
  if (c.out.empty() && c.close_after_flush) {
    c.dead = true;
    close(c.fd);
  }
}

// Before the handshake is over a client is a stranger: its refusal goes to the
// rate-limited log and counts as refused; after, it is one of the job's own.
void StoreServer::Impl::drop(Client& c, const std::string& why) {
  if (c.greeted) {
    spdlog::warn("store server: dropping client {}: {}", c.peer, why);
  } else {
    refused++;
    refusal_log.refused(c.peer, why);
  }
  dropped++;
  c.dead = true;
  close(c.fd);
  std::erase_if(waiters, [id = c.id](const Waiter& w) { return w.client == id; });
}

void StoreServer::Impl::reply(Client& c, Writer& w) {
  c.out += w.frame();
  if (c.out.size() > kMaxPendingOutput) {
    drop(c, "it does not read its replies");
    return;
  }
  flush(c);
}

void StoreServer::Impl::process(uint64_t id) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  Client& c = it->second;
  size_t consumed = 0;
  while (!c.dead && !c.blocked && !c.close_after_flush && c.in.size() - consumed >= 4) {
    const uint32_t len = read_frame_length(c.in.data() + consumed);
    if (std::string why = oversized(c, len); !why.empty()) {
      drop(c, why);
      return;
    }
    if (c.in.size() - consumed - 4 < len) break;  // incomplete: wait for more bytes
    const std::string_view body(c.in.data() + consumed + 4, len);
    consumed += 4 + static_cast<size_t>(len);
    bool well_formed = false;
    try {
      well_formed = handle(id, c, body);
    } catch (const std::exception& e) {  // OpenSSL out of randomness: only this client fails
      drop(c, e.what());
      return;
    }
    if (!well_formed) {
      drop(c, c.greeted ? "malformed request" : "malformed handshake");
      return;
    }
  }
  if (!c.dead) c.in.erase(0, consumed);
}

std::vector<std::string> StoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> absent;
  for (const auto& k : keys) {
    if (!kv.count(k)) absent.push_back(k);
  }
  return absent;
}

// Returns false for a malformed request (the caller drops the client).
bool StoreServer::Impl::handle(uint64_t id, Client& c, std::string_view body) {
  Reader r(body);
  Writer w;
  if (!c.greeted) return c.challenged ? check_proof(c, r) : hello(c, r);

  const auto read_keys = [&r]() {
    std::vector<std::string> keys;
    const uint32_t n = r.u32();
    if (n > kMaxKeysPerRequest) return keys;  // r stays ok; caught by the n check below
    for (uint32_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str(StoreLimits::kMaxKeyBytes));
    return keys;
  };
  const auto command = static_cast<Command>(r.u8());
  const auto ok = static_cast<uint8_t>(Status::ok);
  switch (command) {
    case Command::set: {
      std::string key = r.str(StoreLimits::kMaxKeyBytes);
      std::string value = r.str(StoreLimits::kMaxValueBytes);
      if (!r.ok() || !r.done()) return false;
      written[key] = Clock::now();
      kv[std::move(key)] = std::move(value);
      w.u8(ok);
      reply(c, w);
      on_key_changed();
      return true;
    }
    case Command::get:
    case Command::wait: {
      std::vector<std::string> keys;
      if (command == Command::get) {
        keys.push_back(r.str(StoreLimits::kMaxKeyBytes));
      } else {
        keys = read_keys();
      }
      const int64_t timeout_ms = r.i64();
      if (!r.ok() || !r.done() || keys.empty()) return false;
      std::vector<std::string> absent = missing(keys);
      if (absent.empty()) {
        w.u8(ok);
        if (command == Command::get) w.str(kv[keys[0]]);
        reply(c, w);
      } else if (timeout_ms <= 0) {
        w.u8(static_cast<uint8_t>(Status::timeout)).u32(static_cast<uint32_t>(absent.size()));
        for (const auto& k : absent) w.str(k);
        reply(c, w);
      } else {
        c.blocked = true;
        waiters.push_back({id, command == Command::get, std::move(keys),
                           Clock::now() + std::chrono::milliseconds(std::min(timeout_ms, kMaxWaitMs))});
      }
      return true;
    }
    case Command::add: {
      std::string key = r.str(StoreLimits::kMaxKeyBytes);
      const int64_t delta = r.i64();
      if (!r.ok() || !r.done()) return false;
      int64_t value = 0;
      if (auto found = kv.find(key); found != kv.end()) {
        const std::string& s = found->second;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
        if (ec != std::errc() || end != s.data() + s.size()) {
          w.u8(static_cast<uint8_t>(Status::error)).str("add: key " + quote_untrusted(key) + " does not hold an integer");
          reply(c, w);
          return true;
        }
      }
      if (__builtin_add_overflow(value, delta, &value)) {
        w.u8(static_cast<uint8_t>(Status::error)).str("add: key " + quote_untrusted(key) + " would overflow a 64-bit integer");
        reply(c, w);
        return true;
      }
      kv[key] = std::to_string(value);
      written[key] = Clock::now();
      w.u8(ok).i64(value);
      reply(c, w);
      on_key_changed();
      return true;
    }
    case Command::compare_set: {
      std::string key = r.str(StoreLimits::kMaxKeyBytes);
      std::string expected = r.str(StoreLimits::kMaxValueBytes);
      std::string desired = r.str(StoreLimits::kMaxValueBytes);
      if (!r.ok() || !r.done()) return false;
      auto found = kv.find(key);
      const bool swap = found == kv.end() ? expected.empty() : found->second == expected;
      if (swap) {
        kv[key] = desired;
        written[key] = Clock::now();
      }
      auto now = kv.find(key);
      w.u8(ok).str(now == kv.end() ? std::string() : now->second);
      reply(c, w);
      if (swap) on_key_changed();
      return true;
    }
    case Command::delete_key: {
      std::string key = r.str(StoreLimits::kMaxKeyBytes);
      if (!r.ok() || !r.done()) return false;
      written.erase(key);
      w.u8(ok).u8(kv.erase(key) ? 1 : 0);
      reply(c, w);
      return true;
    }
    case Command::check: {
      std::vector<std::string> keys = read_keys();
      if (!r.ok() || !r.done()) return false;
      w.u8(ok).u8(missing(keys).empty() ? 1 : 0);
      reply(c, w);
      return true;
    }
    case Command::read_aged: {
      std::vector<std::string> keys = read_keys();
      if (!r.ok() || !r.done()) return false;
      const auto now = Clock::now();
      w.u8(ok).u32(static_cast<uint32_t>(keys.size()));
      for (const auto& k : keys) {
        auto found = kv.find(k);
        if (found == kv.end()) {
          w.u8(0);
          continue;
        }
        const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - written[k]);
        w.u8(1).str(found->second).i64(age.count());
      }
      reply(c, w);
      return true;
    }
    case Command::num_keys:
      if (!r.done()) return false;
      w.u8(ok).i64(static_cast<int64_t>(kv.size()));
      reply(c, w);
      return true;
  }
  return false;  // unknown command
}

void StoreServer::Impl::on_key_changed() {
  for (size_t i = 0; i < waiters.size();) {
    Waiter& wt = waiters[i];
    if (!missing(wt.keys).empty()) {
      ++i;
      continue;
    }
    auto it = clients.find(wt.client);
    if (it != clients.end() && !it->second.dead) {
      Writer w;
      w.u8(static_cast<uint8_t>(Status::ok));
      if (wt.is_get) w.str(kv[wt.keys[0]]);
      it->second.blocked = false;
      reply(it->second, w);
      runnable.push_back(wt.client);
    }
    waiters.erase(waiters.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void StoreServer::Impl::expire_waiters() {
  const auto now = Clock::now();
  for (size_t i = 0; i < waiters.size();) {
    Waiter& wt = waiters[i];
    if (wt.deadline > now) {
      ++i;
      continue;
    }
    auto it = clients.find(wt.client);
    if (it != clients.end() && !it->second.dead) {
      const std::vector<std::string> absent = missing(wt.keys);
      Writer w;
      w.u8(static_cast<uint8_t>(Status::timeout)).u32(static_cast<uint32_t>(absent.size()));
      for (const auto& k : absent) w.str(k);
      it->second.blocked = false;
      reply(it->second, w);
      runnable.push_back(wt.client);
    }
    waiters.erase(waiters.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace tandem
