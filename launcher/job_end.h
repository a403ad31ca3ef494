// How a job's end is told: the failure report line by line, and the last handshake through
// the store (node 0 keeps it until every node has read the end). Shared by the fixed and
// the elastic paths of tandemrun (main.cpp, elastic_job.cpp).
#pragma once

#include <string>

#include "launcher/options.h"
#include "launcher/rendezvous.h"

namespace tandem::launcher {

// Logs `text` as errors, one call per line, so each keeps the "tandemrun[...]:" prefix.
void print_block(const std::string& text);

// Node 0 holds the store open until every node has seen the end of `attempt`. With
// --rdzv-endpoint nobody closes it, but node 0 still waits, so that its tandemrun ending
// means every node has read the end: a script may stop tandem-store after that.
void close_job(const LaunchOptions& o, JobStore& store, int attempt);

}  // namespace tandem::launcher
