// Where tandemrun's job secret comes from and how its workers get it (docs/security.md).
// --job-secret-file (or TANDEM_JOB_SECRET_FILE) names it; without one, a single-node job
// makes its own (32 random bytes) and a multi-node job warns once and runs without,
// since other nodes could not learn a generated one. Workers that are Tandem programs (or
// any, with --pass-job-secret) receive it in a sealed memfd they inherit, named by
// TANDEM_JOB_SECRET_FD, and close once read; never in the environment: an
// environment is copied into every process the training program starts, and is what
// crash reports and job schedulers print.
// Invariant: after prepare_job_secret, o.job_secret is empty or usable, and
// o.job_secret_fd >= 0 exactly when it is non-empty.
#pragma once

#include "launcher/options.h"

namespace tandem::launcher {

// Reads or generates the secret and makes the descriptor. Throws UsageError for a
// missing, unreadable, empty or malformed secret file.
void prepare_job_secret(LaunchOptions& o);

}  // namespace tandem::launcher
