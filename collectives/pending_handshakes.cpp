// Pending handshakes by peer address (see pending_handshakes.h).
#include "collectives/pending_handshakes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace tandem {

std::optional<uint64_t> PendingHandshakes::add(uint64_t id, const std::string& address, Clock::time_point deadline) {
  by_id_.emplace(id, Entry{address, deadline});
  auto& ids = by_address_[address];
  if (!ids.empty()) load_.erase({ids.size(), address});
  ids.insert(id);
  load_.emplace(ids.size(), address);
  if (by_id_.size() <= capacity_) return std::nullopt;
  // The address holding the most (the last in load_), its oldest connection.
  const uint64_t victim = *by_address_.at(std::prev(load_.end())->second).begin();
  remove(victim);
  return victim;
}

void PendingHandshakes::remove(uint64_t id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const std::string address = std::move(it->second.address);
  by_id_.erase(it);
  auto found = by_address_.find(address);
  auto& ids = found->second;
  load_.erase({ids.size(), address});
  ids.erase(id);
  if (ids.empty()) {
    by_address_.erase(found);
  } else {
    load_.emplace(ids.size(), address);
  }
}

std::vector<uint64_t> PendingHandshakes::expired(Clock::time_point now) {
  std::vector<uint64_t> out;
  while (!by_id_.empty() && by_id_.begin()->second.deadline <= now) {
    out.push_back(by_id_.begin()->first);
    remove(out.back());
  }
  return out;
}

std::optional<PendingHandshakes::Clock::time_point> PendingHandshakes::next_deadline() const {
  if (by_id_.empty()) return std::nullopt;
  return by_id_.begin()->second.deadline;
}

size_t PendingHandshakes::from(const std::string& address) const {
  const auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second.size();
}

std::string address_key(const void* sockaddr_storage_ptr) {
  const auto* sa = static_cast<const sockaddr*>(sockaddr_storage_ptr);
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = static_cast<const sockaddr_in*>(sockaddr_storage_ptr);
    return inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) ? text : "other";
  }
  if (sa->sa_family != AF_INET6) return "other";
  const auto* in6 = static_cast<const sockaddr_in6*>(sockaddr_storage_ptr);
  if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
    in_addr v4{};
    std::memcpy(&v4, in6->sin6_addr.s6_addr + 12, 4);
    return inet_ntop(AF_INET, &v4, text, sizeof(text)) ? text : "other";
  }
  in6_addr prefix{};
  std::memcpy(prefix.s6_addr, in6->sin6_addr.s6_addr, 8);  // the /64 a host is given
  return inet_ntop(AF_INET6, &prefix, text, sizeof(text)) ? std::string(text) + "/64" : "other";
}

}  // namespace tandem
