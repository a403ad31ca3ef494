// tandemrun: the launcher (docs/reference.md; docs/launching.md). Parses flags, hosts or
// joins the job's store (--rdzv-endpoint: a tandem-store elsewhere), then runs attempts until one succeeds, the job is stopped,
// or --max-restarts is used up.
//
// Exit codes: 0 every worker of the job exited 0; 1 the job failed (the first failure
// is printed on every node); 2 usage error; 75 every worker exited 75, stopped to be
// resumed (SIGUSR1; no restart); 128+N this tandemrun received signal N (130 for
// SIGINT, 143 for SIGTERM). Node 0 keeps the store up until every node has
// read the job's end, so no node is left guessing.
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <optional>

#include "collectives/init.h"
#include "launcher/console.h"
#include "launcher/elastic_job.h"
#include "launcher/job_end.h"
#include "launcher/failure.h"
#include "launcher/job_secret.h"
#include "launcher/options.h"
#include "launcher/program_kind.h"
#include "launcher/rendezvous.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "launcher/worker_process.h"

namespace tandem::launcher {
namespace {

int run(const LaunchOptions& flags, LauncherSignals& signals, Console& console) {
  std::string program;
  try {
    program = resolve_program(flags.command[0]);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  LaunchOptions o = flags;
  const ProgramKind kind = program_kind(program);
  // The secret goes only where a store client runs: a program linked with Tandem (the
  // marker of its collectives), or any program with --pass-job-secret.
  if (o.job_secret_fd >= 0 && (kind.sends_heartbeats || o.pass_job_secret)) {
    o.worker_secret_fd = o.job_secret_fd;
  } else if (o.job_secret_fd >= 0) {
    spdlog::info("the job secret is not passed to {}: it is {}, so it needs no store (a script or an interpreter that "
                 "starts a Tandem program needs --pass-job-secret)", program, kind.why);
  }
  if (o.hang_timeout.count() > 0) {
    // Heartbeats come only from Tandem's collectives: watching a program that sends none
    // would report a hang (and SIGUSR2 it) however well it runs.
    if (!kind.sends_heartbeats) {
      spdlog::warn("--hang-timeout-s {}: {} is {}, so it sends no heartbeats; hang detection is off for this job "
                   "(only programs built with Tandem's collectives, started directly, send them)",
                   o.hang_timeout.count() / 1000.0, program, kind.why);
      o.hang_timeout = std::chrono::milliseconds(0);
    }
  }
  auto poll_signal = [&signals] { return signals.drain().termination; };

  std::unique_ptr<JobStore> store;
  bool registered = false;  // a refused node must not sign for the node it impersonated
  int attempt = 0;
  try {
    store = std::make_unique<JobStore>(o, poll_signal);
    if (!o.slurm_note.empty()) spdlog::info("{}; it is on port {}", o.slurm_note, store->port());
    if (o.master_port == 0) {
      spdlog::info("--master-port 0: the store listens on port {} (TANDEM_STORE_PORT={})", store->port(), store->port());
    }
    if (o.elastic()) {
      spdlog::info("{} the store of job {} at {}{}; elastic: {} to {} nodes (last call {} s, up to {} s)",
                   o.hosts_store() ? "hosting" : "joined", o.job_id, store->where(),
                   o.external_store() ? " (--rdzv-endpoint)" : "", o.nnodes_min, o.nnodes_max,
                   o.rdzv_last_call.count() / 1000.0, o.rdzv_timeout.count() / 1000.0);
    } else if (o.nnodes > 1) {
      spdlog::info("{} the store of job {} at {}{}; waiting for {} nodes (up to {} s)",
                   o.node_rank == 0 && !o.external_store() ? "hosting" : "joined", o.job_id, store->where(),
                   o.external_store() ? " (--rdzv-endpoint)" : "", o.nnodes, o.rdzv_timeout.count() / 1000.0);
    }
    store->register_node();
    registered = true;
    if (o.elastic()) return run_generations(o, *store, signals, console, program);
    for (;; ++attempt) {
      store->start_attempt(attempt);
      if (o.nnodes > 1 && attempt == 0) {
        spdlog::info("all {} nodes joined; starting ranks {}..{} of {}", o.nnodes, o.global_rank(0),
                     o.global_rank(o.nproc_per_node - 1), o.world_size());
      }
      const AttemptEnd end = run_attempt(o, *store, signals, console, program, attempt);
      if (end.kind == AttemptEnd::Kind::ok) {
        close_job(o, *store, attempt);
        return 0;
      }
      if (end.kind == AttemptEnd::Kind::resume) {
        spdlog::warn("the job stopped to be resumed: every rank exited {} after writing its checkpoint; no restart "
                     "(run the same command with --resume auto to go on)",
                     kExitStoppedToResume);
        close_job(o, *store, attempt);
        return kExitStoppedToResume;
      }
      const Failure& f = *end.first_failure;
      const bool last = end.kind == AttemptEnd::Kind::stopped || attempt >= o.max_restarts ||
                        (end.store_lost && o.node_rank == 0 && !o.external_store());
      print_block((o.max_restarts > 0 ? "attempt " + std::to_string(attempt) + " failed: " : "job failed: ") +
                  report(f));
      if (last) {
        if (end.kind != AttemptEnd::Kind::stopped && o.max_restarts > 0 && !end.store_lost) {
          spdlog::error("no restart left (--max-restarts {}): the job failed", o.max_restarts);
        }
        if (!end.store_lost) close_job(o, *store, attempt);
        return end.interrupted_by ? 128 + end.interrupted_by : 1;
      }
      if (end.store_lost) {
        // Cut off from the store (a link, node 0 or tandem-store's host went down): wait
        // for it to come back, up to --rdzv-timeout-s, and join the restart there.
        spdlog::warn("reconnecting to the store at {} to join attempt {} (up to {:.0f} s)", store->where(), attempt + 1,
                     o.rdzv_timeout.count() / 1000.0);
        store->reconnect();
      }
      spdlog::warn("restarting the whole job: attempt {} of at most {} (TANDEM_RESTART_COUNT={})", attempt + 1,
                   o.max_restarts + 1, attempt + 1);
    }
  } catch (const Interrupted& i) {
    spdlog::warn("received {} before the workers started; stopping", signal_name(i.signal));
    if (registered) close_job(o, *store, attempt);
    return 128 + i.signal;
  } catch (const RendezvousError& e) {
    spdlog::error("{}", e.what());
    if (registered) close_job(o, *store, attempt);
    return signals.first_termination() ? 128 + signals.first_termination() : 1;
  } catch (const StoreError& e) {
    spdlog::error("the job's store failed: {}", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace tandem::launcher

int main(int argc, char** argv) {
  using namespace tandem::launcher;
  // Before any thread exists, so every thread inherits the blocked mask.
  LauncherSignals signals;
  std::optional<LaunchOptions> options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tandemrun: usage error: %s\nRun tandemrun --help for the accepted flags.\n", e.what());
    return 2;
  }
  if (!options) return 0;
  // The default logger, because the store server (collectives) logs through it too.
  Console console;
  spdlog::set_default_logger(make_console_logger(
      console, options->elastic() ? "tandemrun[" + this_host() + " pid " + std::to_string(getpid()) + "]: "
               // an elastic node's rank changes with each generation: named by what does not
               : options->nnodes > 1 ? "tandemrun[node " + std::to_string(options->node_rank) + "]: "
                                     : "tandemrun: "));
  try {
    prepare_job_secret(*options);
  } catch (const UsageError& e) {
    spdlog::error("usage error: {}", e.what());
    return 2;
  }
  try {
    return run(*options, signals, console);
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 1;
  }
}
