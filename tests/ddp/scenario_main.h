// The main() of the DDP test workers (ddp_worker, zero_worker):
//   WORKER SCENARIO [--backend NAME]
// runs one named scenario on a group from init_process_group (one BLAS thread, 60 s
// timeouts), then a barrier; prints "ok: ..." or "FAIL: ..." and exits 0, 1, or 2 on
// bad arguments. `rank` receives the group's rank as soon as it is known (the
// scenarios' check() messages name it).
#pragma once

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "collectives/init.h"
#include "runtime/kernels.h"

namespace tandem {

using Scenario = std::function<void(std::shared_ptr<ProcessGroup>)>;

inline int run_scenario_main(int argc, char** argv, const char* program,
                             const std::map<std::string, Scenario>& scenarios, int& rank) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--backend")) {
    std::fprintf(stderr, "usage: %s SCENARIO [--backend NAME]\n", program);
    return 2;
  }
  const std::string scenario = argv[1];
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  try {
    set_cpu_threads(1);
    InitOptions io;
    if (argc == 4) io.backend = parse_backend(argv[3]);
    io.timeout = std::chrono::seconds(60);
    io.rendezvous_timeout = std::chrono::seconds(60);
    auto pg = init_process_group(io);
    rank = pg->rank();
    it->second(pg);
    pg->barrier()->synchronize(std::chrono::seconds(60));
    std::printf("ok: %s on rank %d of %d (%s)\n", scenario.c_str(), pg->rank(), pg->size(),
                pg->backend_name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s on rank %d: %s\n", scenario.c_str(), rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace tandem
