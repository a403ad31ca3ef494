// Whether a process on this host has ended: no such pid, or a zombie its parent has not
// reaped yet (kill(pid, 0) still succeeds for one). Used by the shm backend's dead-peer
// check and by rank health's "gone" verdict. Internal header (not installed).
#pragma once

#include <cstdint>

namespace tandem {

bool process_gone(int64_t pid);

}  // namespace tandem
