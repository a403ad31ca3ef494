// An elastic job (tandemrun --nnodes MIN:MAX; docs/elastic.md): one generation after
// another, each with the nodes its rendezvous admitted (JobStore::join_generation), until
// one ends ok, the job is stopped or preempted, or the rendezvous refuses (too few nodes,
// --max-restarts used up). Recovery is from the newest checkpoint: the workers restart at
// the new world size. With --log-dir, DIR/elastic.json keeps this node's history of
// generations (members, change, outcome, how long forming each took).
#pragma once

#include <string>

#include "launcher/console.h"
#include "launcher/options.h"
#include "launcher/rendezvous.h"
#include "launcher/signals.h"

namespace tandem::launcher {

// Returns tandemrun's exit code (main.cpp lists them).
int run_generations(const LaunchOptions& o, JobStore& store, LauncherSignals& signals, Console& console,
                    const std::string& program);

}  // namespace tandem::launcher
