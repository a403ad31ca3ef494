// Fuzz target: tandemrun's flag parsing (launcher/options.h). The input is the command line
// after "tandemrun", one argument per line (or NUL-separated). Contract checked:
// parse_options throws UsageError, returns nullopt (--help, --version), or returns options
// that keep LaunchOptions' invariant: complete and consistent, so nothing downstream
// re-checks them (ranks and world size in range, durations usable as deadlines).
#include <chrono>
#include <climits>

#include "launcher/options.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tandem::fuzz::silence_stdout();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::launcher;
  tandem::fuzz::Argv args("tandemrun", data, size);
  std::optional<LaunchOptions> o;
  try {
    o = parse_options(args.argc(), args.argv());
  } catch (const UsageError&) {
    return 0;
  }
  if (!o) return 0;
  FUZZ_CHECK(o->nproc_per_node >= 1 && o->nnodes >= 1);
  if (o->elastic()) {
    // --nnodes MIN:MAX: ranks come from the rendezvous; only the store's host names itself.
    FUZZ_CHECK(o->nnodes_min >= 1 && o->nnodes_min <= o->nnodes_max && o->nnodes == o->nnodes_max);
    FUZZ_CHECK(o->node_rank == -1 || (o->node_rank == 0 && o->hosts_store()));
  } else {
    FUZZ_CHECK(o->node_rank >= 0 && o->node_rank < o->nnodes);
  }
  // Every global rank, and the world size, is an int.
  FUZZ_CHECK(static_cast<int64_t>(o->nnodes) * o->nproc_per_node <= INT_MAX);
  FUZZ_CHECK(o->world_size() >= 1 && o->global_rank(o->nproc_per_node - 1) < o->world_size());
  FUZZ_CHECK(o->master_port >= 0 && o->master_port <= 65535 && !o->master_addr.empty());
  FUZZ_CHECK(o->max_restarts >= 0);
  if (o->rank_filter)
    for (int r : *o->rank_filter) FUZZ_CHECK(r >= 0 && r < o->world_size());
  FUZZ_CHECK(!o->job_id.empty() && !o->command.empty() && !o->command[0].empty());
  // The launcher adds these to steady_clock::now() (nanoseconds): they must not overflow.
  using std::chrono::steady_clock;
  FUZZ_CHECK(o->grace.count() >= 0 && o->rdzv_timeout.count() > 0);
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::time_point::max() -
                                                                          steady_clock::now());
  FUZZ_CHECK(o->grace < room && o->rdzv_timeout < room && o->rdzv_last_call < room);
  FUZZ_CHECK(o->rdzv_last_call.count() >= 0);
  return 0;
}
