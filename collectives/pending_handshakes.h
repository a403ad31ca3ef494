// The store's connections that have not finished their handshake (strangers, until they
// prove the job secret), grouped by peer address so a flood from one address cannot push
// out another's handshake (docs/security.md).
//
// At most `capacity` are held. Past it, the one dropped is the oldest of the address that
// holds the most: an address with fewer pending connections than another never loses one
// to it, so a rank connecting from its own node keeps its handshake against a flood from
// elsewhere (from its own address, it is the flood's equal: the rank's client retries,
// collectives/store_client.cpp). Every operation costs O(log capacity): accepting a
// connection never scans the others.
// Invariant: every id is in `by_id_`, in its address's set and counted in `load_` once; ids
// are added in increasing order with deadlines that do not decrease (one handshake timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class PendingHandshakes {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PendingHandshakes(size_t capacity) : capacity_(capacity) {}

  // A new connection from `address` (address_key's form). Returns the id to drop to stay
  // within the capacity (possibly this one's), already forgotten here; nullopt if none.
  std::optional<uint64_t> add(uint64_t id, const std::string& address, Clock::time_point deadline);
  // The connection finished its handshake, or is gone. Unknown ids are ignored.
  void remove(uint64_t id);
  // The ids whose deadline is at or before `now`, oldest first; forgotten here.
  std::vector<uint64_t> expired(Clock::time_point now);
  // The earliest deadline; nullopt when none is pending.
  std::optional<Clock::time_point> next_deadline() const;

  size_t size() const { return by_id_.size(); }
  size_t from(const std::string& address) const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string address;
    Clock::time_point deadline;
  };
  size_t capacity_;
  std::map<uint64_t, Entry> by_id_;  // the first is the oldest, with the earliest deadline
  std::map<std::string, std::set<uint64_t>> by_address_;
  std::set<std::pair<size_t, std::string>> load_;  // (pending count, address): the last holds the most
};

// The key a peer's connections are grouped by: an IPv4 address as text, an IPv6 one by
// its /64 prefix (one host often holds a whole /64), a v4-mapped IPv6 one as the IPv4.
// `addr` is a sockaddr_in or sockaddr_in6; anything else is "other".
std::string address_key(const void* sockaddr_storage_ptr);

}  // namespace tandem
