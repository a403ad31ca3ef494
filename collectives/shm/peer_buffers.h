// PeerBuffers: the shm backend's shared buffers (ProcessGroup::allocate_shared_buffer).
// Every rank's buffer of one allocation is mapped into every rank, so an all-reduce on
// them reads each peer's data where it lies instead of copying it into the segment.
//
// Allocation k (a collective call, so k is the same on every rank):
//   1. each rank creates its own POSIX shared-memory object <segment name>-b<k>-r<rank>,
//      reserves its pages (posix_fallocate: a full /dev/shm fails here, not with SIGBUS
//      at the first touch) and maps it;
//   2. it publishes "ok <bytes>" or "error <why>" under shm/buffer/<k>/<rank> in the
//      group's store, and reads every rank's;
//   3. if all are ok with the same size, it maps every peer's object and publishes
//      shm/buffer/<k>/mapped/<rank> ("ok" or "error <why>") and reads every rank's;
//   4. it unlinks its own object: /dev/shm keeps nothing of the job, even after SIGKILL.
// Any rank's error in 2 or 3 makes every rank drop the allocation (allocate returns
// null, with the first rank's reason); a store timeout (a rank that never comes) throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/store.h"

namespace tandem {

class PeerBuffers {
 public:
  struct Registry;
  // One allocation: every rank's buffer, mapped in this process. Unmapped (and no longer
  // found) when the last reference goes.
  struct Region {
    int64_t id = 0;
    int rank = 0;  // this process's
    size_t bytes = 0;
    std::vector<uint8_t*> base;  // by rank; base[rank] is this rank's own buffer
    std::shared_ptr<Registry> registry;
    ~Region();
  };

  PeerBuffers(int rank, int size, std::string name_prefix);

  // Sets up allocation number next (see above). On failure returns null and puts the
  // reason in `why`.
  std::shared_ptr<Region> allocate(size_t bytes, Store& store, std::chrono::milliseconds timeout, std::string& why);

  // The live region whose buffer on this rank holds [data, data + bytes), with data's
  // byte offset into it; null when there is none.
  std::shared_ptr<Region> find(const void* data, size_t bytes, size_t& offset) const;

 private:
  int rank_;
  int size_;
  std::string prefix_;
  int64_t next_ = 0;
  std::shared_ptr<Registry> registry_;
};

}  // namespace tandem
