#include "collectives/shm/peer_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem {

struct PeerBuffers::Registry {
  mutable std::mutex mutex;
  std::map<uintptr_t, std::weak_ptr<Region>> by_base;  // this rank's buffer -> its region
};

PeerBuffers::Region::~Region() {
  if (registry) {
    std::lock_guard<std::mutex> lock(registry->mutex);
    registry->by_base.erase(reinterpret_cast<uintptr_t>(base.at(static_cast<size_t>(rank))));
  }
  for (uint8_t* p : base)
    if (p) munmap(p, bytes);
}

PeerBuffers::PeerBuffers(int rank, int size, std::string name_prefix)
    : rank_(rank), size_(size), prefix_(std::move(name_prefix)), registry_(std::make_shared<Registry>()) {}

namespace {

std::string errno_text(const char* what, const std::string& name) {
  return std::string(what) + "(" + name + "): " + std::strerror(errno);
}

// Creates, reserves and maps this rank's object; "" or the reason it failed.
std::string create_own(const std::string& name, size_t bytes, uint8_t*& mapped) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return errno_text("shm_open", name);
  std::string why;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    why = errno_text("ftruncate", name);
  } else if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    why = "posix_fallocate(" + name + ", " + std::to_string(bytes) + " bytes): " + std::strerror(e) +
          " (is /dev/shm large enough?)";
  } else {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) why = errno_text("mmap", name);
    else mapped = static_cast<uint8_t*>(p);
  }
  close(fd);
  return why;
}

std::string map_peer(const std::string& name, size_t bytes, uint8_t*& mapped) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return errno_text("shm_open", name);
  std::string why;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    why = name + " has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes);
  } else {
    // Peers' buffers are read, never written, here.
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) why = errno_text("mmap", name);
    else mapped = static_cast<uint8_t*>(p);
  }
  close(fd);
  return why;
}

// Publishes `mine` under key/<rank>, reads every rank's; "" when all say "ok<rest>" with
// the same rest, else the first rank's problem.
std::string exchange(Store& store, const std::string& key, int rank, int size, const std::string& mine,
                     std::chrono::milliseconds timeout) {
  store.set(key + std::to_string(rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key + std::to_string(r));
  store.wait(keys, timeout);
  for (int r = 0; r < size; ++r) {
    const std::string v = store.get(keys[r], timeout);
    if (v.rfind("ok", 0) != 0) return "rank " + std::to_string(r) + ": " + v.substr(std::min<size_t>(v.size(), 6));
    if (v != mine && mine.rfind("ok", 0) == 0)
      return "ranks disagree on the buffer: rank " + std::to_string(rank) + " '" + mine + "', rank " +
             std::to_string(r) + " '" + v + "'";
  }
  return "";
}

}  // namespace

std::shared_ptr<PeerBuffers::Region> PeerBuffers::allocate(size_t bytes, Store& store,
                                                           std::chrono::milliseconds timeout, std::string& why) {
  const int64_t id = next_++;
  auto region = std::make_shared<Region>();
  region->id = id;
  region->rank = rank_;
  region->bytes = bytes;
  region->base.assign(static_cast<size_t>(size_), nullptr);
  const auto object = [&](int r) { return prefix_ + "-b" + std::to_string(id) + "-r" + std::to_string(r); };
  const std::string key = "shm/buffer/" + std::to_string(id) + "/";
  const std::string own = object(rank_);
  std::string mine = bytes == 0 ? "error zero bytes" : create_own(own, bytes, region->base[rank_]);
  if (mine.empty()) mine = "ok " + std::to_string(bytes);
  else if (mine.rfind("error", 0) != 0) mine = "error " + mine;
  try {
    why = exchange(store, key, rank_, size_, mine, timeout);
    if (why.empty()) {
      std::string mapped;
      for (int r = 0; r < size_ && mapped.empty(); ++r)
        if (r != rank_) mapped = map_peer(object(r), bytes, region->base[r]);
      why = exchange(store, key + "mapped/", rank_, size_, mapped.empty() ? "ok" : "error " + mapped, timeout);
    }
  } catch (...) {
    if (region->base[rank_]) shm_unlink(own.c_str());
    throw;
  }
  if (region->base[rank_]) shm_unlink(own.c_str());
  if (!why.empty()) return nullptr;  // the region's destructor unmaps what was mapped
  region->registry = registry_;
  std::lock_guard<std::mutex> lock(registry_->mutex);
  registry_->by_base[reinterpret_cast<uintptr_t>(region->base[rank_])] = region;
  return region;
}

std::shared_ptr<PeerBuffers::Region> PeerBuffers::find(const void* data, size_t bytes, size_t& offset) const {
  const auto at = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(registry_->mutex);
  auto it = registry_->by_base.upper_bound(at);
  if (it == registry_->by_base.begin()) return nullptr;
  --it;
  std::shared_ptr<Region> region = it->second.lock();
  if (!region || at + bytes > it->first + region->bytes) return nullptr;
  offset = at - it->first;
  return region;
}

}  // namespace tandem
