// ShmSegment: one POSIX shared-memory segment per group, shared by ranks on one node,
// and the round protocol every shm collective is built from.
//
// Layout: a header (magic, job id, nonce, world size, slot size), one cache-line block
// of state per rank (published round, consumed round, pid, heartbeat), then two slots
// per rank (round parity) of `slot_bytes` each, then two result areas per rank of the
// same size (large all-reduces: a rank's reduced share, read by the peers next round).
//
// One round k (the same sequence of rounds on every rank, driven by the comm thread):
//   1. wait until every peer has consumed round k-2, the last round that used my slot
//      k % 2 (no closing barrier: a rank runs at most one round ahead of the slowest);
//   2. fill my slot k % 2, then publish arrived = k (release);
//   3. wait until every peer's arrived >= k (acquire): their slots are complete;
//   4. consume: read every rank's slot k % 2 (in rank order where it reduces);
//   5. publish consumed = k (release).
// Waits spin (pause, then yield), check about every millisecond that the awaited
// peers' processes still exist ("rank R (pid P) exited"), and give up at the op's
// deadline with an error that says "timed out" and names the ranks not arrived.
//
// Lifecycle: rank 0 creates the segment (O_CREAT|O_EXCL) under a name derived from the
// job id and a random nonce and publishes the name through the store; the others open
// it and check magic, job id and nonce; after a store barrier (everyone attached) rank 0
// unlinks it, so /dev/shm holds nothing of the job even after SIGKILL.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collectives/store.h"

namespace tandem {

struct ShmRankState;
struct ShmHeader;

class ShmSegment {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::string job_id;
    std::string group_name;
    size_t slot_bytes = 0;  // per slot; each rank has two
    std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  };
  // Creates (rank 0) or opens the segment and waits until every rank attached.
  ShmSegment(const Options& options, Store& store);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // The segment's name, the same on every rank (unlinked once all attached): a prefix
  // unique to this job, attempt and group.
  const std::string& name() const { return name_; }

  // Every wait of the rounds that follow gives up at `deadline` (the op's start plus
  // the group's timeout).
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

  // Runs one round: fill(my slot), then consume(slot of rank r, for every r via slot()).
  // Not thread-safe: only the comm thread calls it.
  void round(const std::function<void(uint8_t* mine)>& fill, const std::function<void()>& consume);
  // The op check, folded into an op's first round: the next round also publishes these
  // kFingerprintBytes of `mine` and, once every rank arrived, runs verify (before
  // consume), which reads every rank's through fingerprint(r) and throws if they
  // disagree. Every rank sees the same bytes, so every rank decides alike.
  static constexpr size_t kFingerprintBytes = 32;
  void check_next_round(const void* mine, std::function<void()> verify);
  const uint8_t* fingerprint(int r) const;
  // Rank r's slot of the current round (valid inside consume).
  const uint8_t* slot(int r) const { return slot_at(r, current_ & 1); }
  // Result areas: a rank writes its own during round k's consume; peers may read it
  // during round k+1's consume (previous_result), and it is not rewritten before k+2,
  // which no rank enters before every rank has finished k+1.
  uint8_t* result() const { return result_at(rank_, current_ & 1); }
  const uint8_t* previous_result(int r) const { return result_at(r, (current_ + 1) & 1); }

 private:
  uint8_t* slot_at(int r, uint64_t parity) const;
  uint8_t* result_at(int r, uint64_t parity) const;
  ShmRankState& state(int r) const;
  enum class Awaited { consumed, arrived };
  void wait_peers(Awaited what, uint64_t round);
  void check_peers_alive(Awaited what, uint64_t round) const;

  int rank_;
  int size_;
  size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_{};
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint64_t current_ = 0;  // the round in progress or last run
  uint8_t fingerprint_[kFingerprintBytes] = {};
  std::function<void()> verify_;  // set: the next round carries fingerprint_
  std::string name_;
};

}  // namespace tandem
