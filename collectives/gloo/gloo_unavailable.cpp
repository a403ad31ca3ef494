// Stands in for the gloo backend when this build lacks it (TANDEM_WITH_GLOO=OFF or
// its dependency missing), so init.cpp needs no #ifdef.
#include "collectives/backends.h"

namespace tandem {

const bool kGlooBuilt = false;

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs&) {
  throw CollectiveError("the gloo backend is not part of this build (configure with -DTANDEM_WITH_GLOO=ON)");
}

}  // namespace tandem
