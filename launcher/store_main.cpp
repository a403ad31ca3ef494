// tandem-store: the job's rendezvous store on a host that trains nothing
// (docs/reference.md, `tandem-store`; docs/launching.md, "The store on its own host").
// Every node's tandemrun joins it with --rdzv-endpoint HOST:PORT, so losing a training
// node no longer loses the store. It serves collectives' StoreServer for one job id,
// with the job secret's handshake when it has one (docs/security.md), until SIGINT or
// SIGTERM.
//
// Exit codes: 0 stopped by SIGINT or SIGTERM (its ordinary end); 1 it could not serve
// (the port is taken, the address does not resolve); 2 usage error; 129 SIGHUP (its
// terminal went away: it was not asked to stop).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <tandem/version.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "collectives/store.h"
#include "collectives/store_auth.h"
#include "launcher/signals.h"

namespace tandem::launcher {
namespace {

struct StoreFlags {
  int port = -1;
  std::string bind_addr = "0.0.0.0";
  std::string job_id;
  std::string secret_file;
  std::string secret_source;  // "--job-secret-file F" or "TANDEM_JOB_SECRET_FILE=F", for messages
  std::string port_file;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Returns nullopt after --help or --version (exit 0). Throws UsageError (exit 2).
std::optional<StoreFlags> parse_flags(int argc, char** argv) {
  StoreFlags f;
  CLI::App app{"tandem-store: serves one job's rendezvous store on a host that trains nothing; every node's\n"
               "tandemrun joins it with --rdzv-endpoint HOST:PORT, so the store outlives any training node.",
               "tandem-store"};
  app.footer("Stop it with SIGINT or SIGTERM (exit 0). Exit codes: 1 it cannot serve (port taken), 2 usage error, "
             "129 SIGHUP. See docs/launching.md, \"The store on its own host\".");
  app.add_option("--port", f.port, "Port to listen on (0: a free one, printed and written to --port-file)")
      ->required();
  app.add_option("--bind-addr", f.bind_addr, "Address to listen on (:: for IPv6, and IPv4 too where the system maps it)")
      ->capture_default_str();
  app.add_option("--job-id", f.job_id,
                 "The job it serves; tandemrun's --job-id must be the same (default: tandem-<port>, which is "
                 "tandemrun's default with --rdzv-endpoint; needed with --port 0)");
  app.add_option("--job-secret-file", f.secret_file,
                 "File holding the job secret, the same as the nodes' (default: $TANDEM_JOB_SECRET_FILE; without "
                 "one, any process that reaches the port and knows the job id gets in: docs/security.md)");
  app.add_option("--port-file", f.port_file, "Once listening, write the port to this file (for --port 0 in scripts)");
  app.set_version_flag("--version", std::string("tandem-store ") + TANDEM_VERSION_STRING, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::CallForVersion&) {
    std::printf("tandem-store %s\n", TANDEM_VERSION_STRING);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (f.port < 0 || f.port > 65535) throw UsageError("--port: " + std::to_string(f.port) + " is not in 0..65535");
  if (f.bind_addr.empty()) throw UsageError("--bind-addr: must not be empty");
  if (app.count("--job-id") && f.job_id.empty()) throw UsageError("--job-id: must not be empty");
  if (f.job_id.empty()) {
    if (f.port == 0) {
      throw UsageError("--port 0 needs --job-id: the default id, tandem-<port>, would name a port the nodes "
                       "cannot know in advance");
    }
    f.job_id = "tandem-" + std::to_string(f.port);
  }
  if (app.count("--job-secret-file") && f.secret_file.empty()) {
    throw UsageError("--job-secret-file: must not be empty");
  }
  f.secret_source = "--job-secret-file " + f.secret_file;
  if (const char* file = std::getenv("TANDEM_JOB_SECRET_FILE"); f.secret_file.empty() && file && *file) {
    f.secret_file = file;
    f.secret_source = std::string("TANDEM_JOB_SECRET_FILE=") + file;
  }
  return f;
}

// Written to a temporary name and renamed, so a reader never sees half a number.
void write_port_file(const std::string& path, int port) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.flush()) throw std::runtime_error("--port-file: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("--port-file: cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

const char* name_of(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

int serve(const StoreFlags& f, LauncherSignals& signals) {
  StoreServerOptions so(f.bind_addr, f.port, f.job_id);
  if (!f.secret_file.empty()) {
    try {
      so.secret = store_auth::read_secret_file(f.secret_file, f.secret_source);
    } catch (const std::invalid_argument& e) {
      spdlog::error("usage error: {}", e.what());
      return 2;
    }
  } else {
    spdlog::warn("no job secret (--job-secret-file or TANDEM_JOB_SECRET_FILE): any process that reaches this port "
                 "and knows the job id '{}' can read and rewrite the job's keys (docs/security.md)",
                 f.job_id);
  }
  std::unique_ptr<StoreServer> server;
  try {
    server = std::make_unique<StoreServer>(so);
  } catch (const StoreError& e) {
    spdlog::error("cannot serve the store: --port {} --bind-addr {}: {}", f.port, f.bind_addr, e.what());
    return 1;
  }
  const int port = server->port();
  const bool v6 = f.bind_addr.find(':') != std::string::npos;
  spdlog::info("serving the store of job {} on {}{}{}:{} ({}); nodes join with tandemrun --rdzv-endpoint HOST:{} "
               "--job-id {}",
               f.job_id, v6 ? "[" : "", f.bind_addr, v6 ? "]" : "", port,
               so.secret.empty() ? "no job secret" : "job secret from " + f.secret_source, port, f.job_id);
  if (!f.port_file.empty()) {
    try {
      write_port_file(f.port_file, port);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
  }
  for (;;) {
    pollfd p{signals.fd(), POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) {
      spdlog::error("poll failed: {}", std::strerror(errno));
      return 1;
    }
    const auto pending = signals.drain();
    for (int sig : pending.forward) spdlog::info("ignoring {} (SIGINT or SIGTERM stop the store)", strsignal(sig));
    if (pending.termination) {
      const int sig = pending.termination;
      spdlog::info("received {}: stopping the store of job {} ({} client(s) refused while it ran)", name_of(sig),
                   f.job_id, server->refused_clients());
      server.reset();
      return sig == SIGINT || sig == SIGTERM ? 0 : 128 + sig;
    }
  }
}

}  // namespace
}  // namespace tandem::launcher

int main(int argc, char** argv) {
  using namespace tandem::launcher;
  LauncherSignals signals;  // before the server's thread starts, so it inherits the mask
  std::optional<StoreFlags> flags;
  try {
    flags = parse_flags(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tandem-store: usage error: %s\nRun tandem-store --help for the accepted flags.\n",
                 e.what());
    return 2;
  }
  if (!flags) return 0;
  // stderr, one whole line per write; the server logs its refusals through it too.
  auto logger = spdlog::stderr_logger_mt("tandem-store");
  logger->set_pattern("tandem-store: %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  try {
    return serve(*flags, signals);
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 1;
  }
}
