// No raw gloo rows: this build has no gloo backend.
#include "collectives/bench/bench_harness.h"

namespace tandem::bench {

std::unique_ptr<Path> make_raw_gloo_path(ProcessGroup&) { return nullptr; }

}  // namespace tandem::bench
