// Fuzz target: Slurm's host lists and compressed task counts (collectives/slurm_hostlist.h,
// collectives/slurm_env.h), which a task started by srun reads from SLURM_STEP_NODELIST
// and SLURM_STEP_TASKS_PER_NODE. The input is the variable's text, given to both parsers.
// Contract checked: expand_hostlist throws std::invalid_argument or returns 1 to kMaxHosts
// names, none empty nor holding '[', ']' or ','; first_host throws exactly when
// expand_hostlist does and otherwise equals its first name; parse_tasks_per_node throws
// SlurmEnvError or returns counts of at least 1.
#include <stdexcept>
#include <string>

#include "collectives/slurm_env.h"
#include "collectives/slurm_hostlist.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::slurm;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> hosts;
  bool refused = false;
  try {
    hosts = expand_hostlist(text);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  std::string first;
  bool first_refused = false;
  try {
    first = first_host(text);
  } catch (const std::invalid_argument&) {
    first_refused = true;
  }
  FUZZ_CHECK(refused == first_refused);
  if (!refused) {
    FUZZ_CHECK(!hosts.empty() && hosts.size() <= kMaxHosts);
    FUZZ_CHECK(first == hosts.front());
    for (const auto& h : hosts) FUZZ_CHECK(!h.empty() && h.find_first_of("[],") == std::string::npos);
  }
  try {
    for (int n : parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", text)) FUZZ_CHECK(n >= 1);
  } catch (const SlurmEnvError&) {
  }
  return 0;
}
