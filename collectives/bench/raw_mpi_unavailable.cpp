// No raw mpi rows: this build has no mpi backend.
#include "collectives/bench/bench_harness.h"

namespace tandem::bench {

std::unique_ptr<Path> make_raw_mpi_path(ProcessGroup&) { return nullptr; }

}  // namespace tandem::bench
