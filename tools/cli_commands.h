// The command-line front of the tools with subcommands (tandem-ckpt, tandem-trace): an
// unknown command is named (CLI11 would only say "A subcommand is required"), --help and
// --version exit 0, and any usage error exits 2 with one line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace tandem {

// Parses argv into app; returns -1 when the chosen command should run, else the exit code.
inline int parse_commands(CLI::App& app, int argc, char** argv, const char* tool,
                          const std::vector<std::string>& commands) {
  const std::string first = argc > 1 ? argv[1] : "";
  bool known = first.empty() || first[0] == '-';
  std::string expected;
  for (size_t i = 0; i < commands.size(); ++i) {
    known = known || first == commands[i];
    expected += (i == 0 ? "" : i + 1 == commands.size() ? " or " : ", ") + commands[i];
  }
  if (!known) {
    std::fprintf(stderr, "%s: usage error: unknown command '%s' (expected %s)\n", tool, first.c_str(),
                 expected.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: usage error: %s\nRun with --help for the commands.\n", tool, e.what());
    return 2;
  }
  return -1;
}

}  // namespace tandem
