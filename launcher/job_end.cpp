// The end of a job (see header).
#include "launcher/job_end.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace tandem::launcher {

namespace {

// Node 0 waits for the other nodes' confirmations this much longer than --grace-s.
constexpr std::chrono::seconds kExitWaitMargin{15};

}  // namespace

void print_block(const std::string& text) {
  // One log call per line keeps the "tandemrun[node N]:" prefix on each.
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = std::min(text.find('\n', start), text.size());
    spdlog::error("{}", text.substr(start, nl - start));
    start = nl + 1;
  }
}

void close_job(const LaunchOptions& o, JobStore& store, int attempt) {
  try {
    store.mark_exited(attempt);
    if (o.node_rank == 0 && o.nnodes > 1) {
      const std::string missing = store.wait_for_exits(attempt, o.grace + kExitWaitMargin);
      if (!missing.empty()) {
        spdlog::warn("node(s) {} did not confirm the end of the job; {}", missing,
                     o.external_store() ? "ending anyway" : "closing the store");
      }
    }
    if (o.node_rank == 0 && o.external_store()) store.mark_ended(attempt);
  } catch (const std::exception& e) {
    spdlog::warn("could not confirm the end of the job through the store: {}", e.what());
  }
}

}  // namespace tandem::launcher
