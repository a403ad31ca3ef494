// Whether a program is Tandem's: it sends Tandem's heartbeats (collectives/health.h), which
// --hang-timeout-s needs, and it is the only kind given the job secret (launcher/job_secret.h): every program linked with Tandem's collectives carries an ELF
// section named "tandem_heartbeats" (collectives/health.cpp), and tandemrun reads the
// program's section headers for it before starting the job. `python3 script.py`, a
// shell script or any other program has none.
#pragma once

#include <string>

namespace tandem::launcher {

// The section's name: collectives/health.cpp defines it, this file looks for it.
inline constexpr const char* kHeartbeatSection = "tandem_heartbeats";

struct ProgramKind {
  bool sends_heartbeats = false;
  std::string why;  // when it does not: "an ELF program without ...", "not an ELF file (a script?)"
};

// `path` as resolve_program found it. Never throws: a file it cannot read is "not" one.
ProgramKind program_kind(const std::string& path);

}  // namespace tandem::launcher
