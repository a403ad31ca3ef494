// Key-value store for rendezvous and progress tracking: an interface, the TCP client
// (TcpStore), a key-prefixing view (PrefixStore), and the server (StoreServer).
// Invariants: every blocking call has a timeout and its error names the keys it
// waited for; a server never lets one client (slow, malformed, oversized, or of
// another job) block or crash the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct StoreLimits {
  static constexpr size_t kMaxKeyBytes = 4 * 1024;
  static constexpr size_t kMaxValueBytes = 64 * 1024 * 1024;
  // A frame holds one request: a value plus its key and small fields, or a wait's
  // key list. Anything longer is malformed and drops the client.
  static constexpr size_t kMaxFrameBytes = kMaxValueBytes + 64 * 1024;
};

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The store was never reached before the connect deadline (nothing listening, or
// unreachable): retrying later may succeed. Any other StoreError from connecting is a
// refusal (another job, another protocol version) that retrying cannot fix.
class StoreUnreachable : public StoreError {
 public:
  using StoreError::StoreError;
};

// A wait or get that ran out of time; `missing_keys` are the keys still absent
// (without any PrefixStore prefix), so callers can say who did not arrive.
class StoreTimeout : public StoreError {
 public:
  StoreTimeout(const std::string& message, std::vector<std::string> keys)
      : StoreError(message), missing_keys(std::move(keys)) {}
  std::vector<std::string> missing_keys;
};

// A key's value and how long ago it was last written, by the server's clock (so
// readers on other machines need no synchronised clocks).
struct AgedValue {
  std::string value;
  std::chrono::milliseconds age{0};
};

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, std::string_view value) = 0;
  // Blocks until `key` exists, then returns its value. Throws StoreTimeout.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value if the key exists now, without waiting.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Blocks until every key exists. Throws StoreTimeout naming the absent ones.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (absent = 0); returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the key holds `expected` (or is absent and `expected` is empty),
  // stores `desired`. Returns the value held after the call ("" when absent).
  virtual std::string compare_set(const std::string& key, std::string_view expected,
                                  std::string_view desired) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Whether every key exists now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual int64_t num_keys() = 0;
  // Each key's value and age in one round trip; nullopt for an absent key. For
  // heartbeats: a value whose age keeps growing was not rewritten.
  virtual std::vector<std::optional<AgedValue>> read_aged(const std::vector<std::string>& keys) = 0;

  // A new, independent connection to the same store (one per thread that blocks),
  // whose connection attempts and non-waiting calls give up after `timeout`.
  virtual std::shared_ptr<Store> clone(std::chrono::milliseconds timeout) const = 0;
  // "store at 127.0.0.1:29500 (job demo)", for error messages.
  virtual std::string describe() const = 0;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string job_id = "tandem";
  // How long to keep retrying the connection (the server may start later).
  std::chrono::milliseconds connect_timeout = std::chrono::minutes(10);
  // Deadline for calls that do not wait for keys (set, add, ...).
  std::chrono::milliseconds op_timeout = std::chrono::seconds(60);
  // The job secret (store_auth.h); empty: none. With one, the client proves it and
  // refuses a store that cannot prove it back, or that does not ask for it.
  std::string secret;
};

// The client. Thread-safe (calls are serialised on one connection), but a thread
// blocked in get/wait holds the connection: give other threads their own clone().
class TcpStore : public Store {
 public:
  // Connects (retrying until options.connect_timeout) and checks the job id.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, std::string_view expected,
                          std::string_view desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t num_keys() override;
  std::vector<std::optional<AgedValue>> read_aged(const std::vector<std::string>& keys) override;
  std::shared_ptr<Store> clone(std::chrono::milliseconds timeout) const override;
  std::string describe() const override;

  const TcpStoreOptions& options() const { return options_; }
  // This end's address on the connection ("10.0.0.2", "fd00::2"): the address by which
  // the store's host reaches this one, and so, on a flat network, every peer. Empty if
  // the socket cannot say.
  std::string local_address() const;

 private:
  struct Reply;
  // Hello, then the job-secret challenge if the store asks (store_auth.h); throws StoreError.
  void handshake();
  Reply call(const std::string& request, std::chrono::milliseconds deadline_after,
             const char* what);

  TcpStoreOptions options_;
  std::mutex mutex_;
  int fd_ = -1;
};

// Prefixes every key, so groups and restarts sharing one server never collide.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {}

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, std::string_view expected,
                          std::string_view desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t num_keys() override { return base_->num_keys(); }
  std::vector<std::optional<AgedValue>> read_aged(const std::vector<std::string>& keys) override {
    return base_->read_aged(prefixed(keys));
  }
  std::shared_ptr<Store> clone(std::chrono::milliseconds timeout) const override;
  std::string describe() const override { return base_->describe(); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;
  StoreTimeout unprefixed(const StoreTimeout& e) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

struct StoreServerOptions {
  StoreServerOptions() = default;
  StoreServerOptions(std::string bind, int port_, std::string job, std::string secret_ = {})
      : bind_addr(std::move(bind)), port(port_), job_id(std::move(job)), secret(std::move(secret_)) {}

  std::string bind_addr = "0.0.0.0";
  int port = 0;  // 0: the kernel picks a free port; read it back with port()
  std::string job_id = "tandem";
  // The job secret (store_auth.h); empty: clients are not authenticated (as before
  // protocol version 3), and a client that has a secret refuses this store.
  std::string secret;
  // A connection that has not finished its handshake by then is dropped, so a client
  // holding one open half-way cannot keep its slot.
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
};

// Serves the store on a background thread (poll() over non-blocking sockets).
// Stops and closes every connection when destroyed.
class StoreServer {
 public:
  // Binds and listens before returning. Throws StoreError ("port P on ADDR is in use").
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  const StoreServerOptions& options() const;
  // Clients dropped so far for protocol violations (malformed, oversized, wrong job,
  // failed authentication, unfinished handshake).
  int64_t dropped_clients() const;
  // Of those, the connections refused for failing the job-secret handshake: no or a
  // wrong proof, closed or timed out before proving it.
  int64_t refused_clients() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
