// The store server's state, shared by its two source files (internal header):
// store_server.cpp (the poll loop, the requests) and store_server_auth.cpp (the
// handshake and its job-secret challenge). Everything in Impl but the atomics is owned
// by the server thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/pending_handshakes.h"
#include "collectives/refusal_log.h"
#include "collectives/store.h"
#include "collectives/store_protocol.h"

namespace tandem {

struct StoreServer::Impl {
  using Clock = std::chrono::steady_clock;

  // Nested, not in the anonymous namespace: Impl has external linkage, and a unity build
  // (TANDEM_UNITY_BUILD) includes this file, where GCC warns of a member of internal type.
  struct Client {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;
    std::string address;           // what pending handshakes are grouped by (address_key)
    bool greeted = false;          // the handshake is over: requests follow
    bool challenged = false;       // hello answered with a challenge: the proof comes next
    Clock::time_point accepted;
    std::string client_nonce;
    std::string server_nonce;
    bool blocked = false;          // a get/wait is parked: do not parse further requests
    bool close_after_flush = false;
    bool dead = false;
    std::string in;
    std::string out;
  };

  struct Waiter {
    uint64_t client = 0;
    bool is_get = false;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  // Connections still in their handshake beyond this many: one is dropped (the oldest of
  // the address that holds the most), so a flood cannot use up descriptors or memory.
  static constexpr size_t kMaxPendingHandshakes = 256;

  StoreServerOptions options;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int port = 0;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> refused{0};
  std::thread thread;

  // Owned by the server thread only.
  std::unordered_map<std::string, std::string> kv;
  std::unordered_map<std::string, Clock::time_point> written;  // when each key of kv last changed
  std::map<uint64_t, Client> clients;
  uint64_t next_client = 1;
  std::vector<Waiter> waiters;
  std::deque<uint64_t> runnable;
  RefusalLog refusal_log;
  PendingHandshakes pending{kMaxPendingHandshakes};

  void run();
  void accept_clients();
  void read_client(uint64_t id, Client& c);
  size_t frame_limit(const Client& c) const;
  std::string oversized(const Client& c, uint32_t len) const;
  void flush(Client& c);
  void drop(Client& c, const std::string& why);
  void refuse_after_reply(Client& c, const std::string& why, store_wire::Writer& w);
  bool hello(Client& c, store_wire::Reader& r);
  bool check_proof(Client& c, store_wire::Reader& r);
  void expire_handshakes();
  void evict_pending(uint64_t id);
  void close_stranger(Client& c, const std::string& why);
  void greet(Client& c);
  Clock::time_point next_deadline() const;
  void process(uint64_t id);
  bool handle(uint64_t id, Client& c, std::string_view body);
  void reply(Client& c, store_wire::Writer& w);
  void on_key_changed();
  void expire_waiters();
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
};

}  // namespace tandem
