// Stands in for the nccl backend when this build lacks it (TANDEM_WITH_CUDA=OFF or
// TANDEM_WITH_NCCL=OFF), so init.cpp needs no #ifdef.
#include "collectives/backends.h"

namespace tandem {

const bool kNcclBuilt = false;

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs&) {
  throw CollectiveError(
      "the nccl backend is not part of this build (configure with -DTANDEM_WITH_CUDA=ON and NCCL installed; "
      "--backend mpi or gloo stage GPU tensors through host memory)");
}

}  // namespace tandem
