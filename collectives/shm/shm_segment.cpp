// ShmSegment (see shm_segment.h): segment set-up, the round protocol, and the waits
// that notice a peer that exited or never arrives.
#include "collectives/shm/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "collectives/process_liveness.h"
#include "collectives/spin.h"
#include "collectives/types.h"

namespace tandem {

namespace {
constexpr uint64_t kMagic = 0x74616e64656d5348ull;  // "tandemSH"
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kJobBytes = 128;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shm needs lock-free 64-bit atomics");
}  // namespace

// Written before `ready` is set by rank 0; read-only afterwards.
struct ShmHeader {
  std::atomic<uint64_t> magic;  // set last (release): the rest is complete
  uint64_t nonce;
  int32_t size;
  uint32_t unused;
  uint64_t slot_bytes;
  char job_id[kJobBytes];
};
static_assert(sizeof(ShmHeader) <= 1024);

// One rank's state. arrived and consumed sit on their own cache lines: peers spin on
// them while their owner writes them.
struct ShmRankState {
  alignas(64) std::atomic<uint64_t> arrived;
  alignas(64) std::atomic<uint64_t> consumed;
  alignas(64) std::atomic<int64_t> pid;
  std::atomic<uint64_t> heartbeat;  // rounds completed plus waits in progress
  // The op check's fingerprint of the op whose first round this was, by round parity
  // (like the slots: parity k % 2 is rewritten no earlier than round k + 2).
  alignas(64) uint8_t fingerprint[2][ShmSegment::kFingerprintBytes];
};
static_assert(sizeof(ShmRankState) == 256);

namespace {

size_t state_bytes(int size) { return (static_cast<size_t>(size) * sizeof(ShmRankState) + 4095) / 4096 * 4096; }

std::string errno_text() { return std::strerror(errno); }

// Characters allowed in the segment's name: letters, digits, '-', '_', '.'.
std::string sanitize(const std::string& s, size_t max) {
  std::string out;
  for (char ch : s) {
    if (out.size() >= max) break;
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                    ch == '_' || ch == '.';
    out += ok ? ch : '_';
  }
  return out;
}


}  // namespace

ShmRankState& ShmSegment::state(int r) const {
  return reinterpret_cast<ShmRankState*>(static_cast<uint8_t*>(base_) + kHeaderBytes)[r];
}

uint8_t* ShmSegment::slot_at(int r, uint64_t parity) const {
  const size_t offset = kHeaderBytes + state_bytes(size_) + (static_cast<size_t>(r) * 2 + parity) * slot_bytes_;
  return static_cast<uint8_t*>(base_) + offset;
}

uint8_t* ShmSegment::result_at(int r, uint64_t parity) const {
  return slot_at(size_, 0) + (static_cast<size_t>(r) * 2 + parity) * slot_bytes_;
}

ShmSegment::ShmSegment(const Options& o, Store& store)
    : rank_(o.rank), size_(o.size), slot_bytes_((o.slot_bytes + 63) / 64 * 64), timeout_(o.timeout) {
  const std::string who = "shm: rank " + std::to_string(rank_) + ": ";
  mapped_bytes_ = kHeaderBytes + state_bytes(size_) + static_cast<size_t>(size_) * 4 * slot_bytes_;
  std::string name;
  uint64_t nonce = 0;
  int fd = -1;
  if (rank_ == 0) {
    std::random_device rd;
    nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
    name = "/tandem-" + sanitize(o.job_id, 80) + "-" + sanitize(o.group_name, 40) + "-" + hex;
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw CollectiveError(who + "shm_open(" + name + ", O_CREAT|O_EXCL) failed: " + errno_text());
    if (ftruncate(fd, static_cast<off_t>(mapped_bytes_)) != 0) {
      const std::string e = errno_text();
      close(fd);
      shm_unlink(name.c_str());
      throw CollectiveError(who + "ftruncate(" + name + ", " + std::to_string(mapped_bytes_) +
                            " bytes) failed: " + e + " (is /dev/shm large enough?)");
    }
  } else {
    const std::string published = store.get("shm/segment", o.timeout);
    const size_t cut = published.find('\n');
    if (cut == std::string::npos) throw CollectiveError(who + "malformed segment key '" + published + "'");
    name = published.substr(0, cut);
    nonce = std::stoull(published.substr(cut + 1), nullptr, 16);
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) throw CollectiveError(who + "shm_open(" + name + ") failed: " + errno_text());
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != mapped_bytes_) {
      close(fd);
      throw CollectiveError(who + "segment " + name + " has " + std::to_string(st.st_size) + " bytes, expected " +
                            std::to_string(mapped_bytes_) + " (ranks disagree on the world size or slot size?)");
    }
  }
  base_ = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (rank_ == 0) shm_unlink(name.c_str());
    throw CollectiveError(who + "mmap(" + name + ") failed: " + errno_text());
  }
  auto* header = static_cast<ShmHeader*>(base_);
  try {
    if (rank_ == 0) {
      header->nonce = nonce;
      header->size = size_;
      header->slot_bytes = slot_bytes_;
      std::strncpy(header->job_id, o.job_id.c_str(), kJobBytes - 1);
      header->magic.store(kMagic, std::memory_order_release);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
      store.set("shm/segment", name + "\n" + hex);
    } else if (header->magic.load(std::memory_order_acquire) != kMagic || header->nonce != nonce ||
               header->size != size_ || header->slot_bytes != slot_bytes_ ||
               std::strncmp(header->job_id, o.job_id.c_str(), kJobBytes - 1) != 0) {
      throw CollectiveError(who + "segment " + name + " belongs to another job or attempt (magic, job id '" +
                            std::string(header->job_id, strnlen(header->job_id, kJobBytes)) +
                            "', nonce or size differ)");
    }
    state(rank_).pid.store(getpid(), std::memory_order_relaxed);
    state(rank_).heartbeat.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    store.set("shm/attached/" + std::to_string(rank_), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back("shm/attached/" + std::to_string(r));
    store.wait(keys, o.timeout);
  } catch (...) {
    if (rank_ == 0) shm_unlink(name.c_str());
    munmap(base_, mapped_bytes_);
    base_ = nullptr;
    throw;
  }
  // Everyone is attached: the name is no longer needed, and nothing outlives the job.
  if (rank_ == 0) shm_unlink(name.c_str());
  name_ = name;
}

void ShmSegment::check_next_round(const void* mine, std::function<void()> verify) {
  std::memcpy(fingerprint_, mine, kFingerprintBytes);
  verify_ = std::move(verify);
}

const uint8_t* ShmSegment::fingerprint(int r) const { return state(r).fingerprint[current_ & 1]; }

ShmSegment::~ShmSegment() {
  if (base_) munmap(base_, mapped_bytes_);
}

void ShmSegment::check_peers_alive(Awaited what, uint64_t round) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const ShmRankState& s = state(p);
    const uint64_t v = (what == Awaited::arrived ? s.arrived : s.consumed).load(std::memory_order_acquire);
    if (v >= round) continue;
    const int64_t pid = s.pid.load(std::memory_order_relaxed);
    if (process_gone(pid)) {
      throw std::runtime_error("shm: rank " + std::to_string(p) + " (pid " + std::to_string(pid) +
                               ") exited while rank " + std::to_string(rank_) + " waited for it");
    }
  }
}

void ShmSegment::wait_peers(Awaited what, uint64_t round) {
  const auto ready = [&] {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const ShmRankState& s = state(p);
      if ((what == Awaited::arrived ? s.arrived : s.consumed).load(std::memory_order_acquire) < round) return false;
    }
    return true;
  };
  for (int i = 0; i < 2000; ++i) {
    if (ready()) return;
    cpu_relax();  // pause on x86, yield on aarch64: the core's hint that this is a spin
  }
  auto next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  for (uint64_t i = 1;; ++i) {
    if (ready()) return;
    std::this_thread::yield();
    if (i % 32 != 0) continue;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(1);
    state(rank_).heartbeat.fetch_add(1, std::memory_order_relaxed);
    check_peers_alive(what, round);
    if (now >= deadline_) {
      std::string missing;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        const ShmRankState& s = state(p);
        if ((what == Awaited::arrived ? s.arrived : s.consumed).load(std::memory_order_acquire) < round)
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      }
      throw std::runtime_error("shm: timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank(s) " +
                               missing + (what == Awaited::arrived ? " to arrive at" : " to finish reading") +
                               " round " + std::to_string(round));
    }
  }
}

void ShmSegment::round(const std::function<void(uint8_t* mine)>& fill, const std::function<void()>& consume) {
  const uint64_t k = ++current_;
  ShmRankState& me = state(rank_);
  // My slot k % 2 was last read by the peers in round k - 2.
  if (k > 2) wait_peers(Awaited::consumed, k - 2);
  fill(slot_at(rank_, k & 1));
  const bool checked = static_cast<bool>(verify_);
  if (checked) std::memcpy(me.fingerprint[k & 1], fingerprint_, kFingerprintBytes);
  me.arrived.store(k, std::memory_order_release);
  wait_peers(Awaited::arrived, k);
  if (checked) {
    const auto verify = std::move(verify_);
    verify_ = nullptr;
    verify();  // throws when the ranks disagree: every rank sees the same fingerprints
  }
  consume();
  me.consumed.store(k, std::memory_order_release);
  me.heartbeat.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tandem
