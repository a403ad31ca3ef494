// Stands in for the mpi backend when this build lacks it (TANDEM_WITH_MPI=OFF or
// its dependency missing), so init.cpp needs no #ifdef.
#include "collectives/backends.h"

namespace tandem {

const bool kMpiBuilt = false;

std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs&) {
  throw CollectiveError("the mpi backend is not part of this build (configure with -DTANDEM_WITH_MPI=ON)");
}

}  // namespace tandem
