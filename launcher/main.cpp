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

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <exception>

#include "collectives/init.h"
#include "launcher/console.h"
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

constexpr std::chrono::seconds kExitWaitMargin{15};

void print_block(const std::string& text) {
  // One log call per line keeps the "tandemrun[node N]:" prefix on each.
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = std::min(text.find('\n', start), text.size());
    spdlog::error("{}", text.substr(start, nl - start));
    start = nl + 1;
  }
}

// Node 0 holds the store open until every node has seen the end of `attempt`. With
// --rdzv-endpoint nobody closes it, but node 0 still waits, so that its tandemrun ending
// means every node has read the end: a script may stop tandem-store after that.
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

std::string seconds_since(std::chrono::steady_clock::time_point t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  return text;
}

constexpr int kFailuresBeforeCooldown = 2;

// Waits `how_long` (--node-cooldown-s), or until a termination signal (Interrupted).
void sit_out(std::chrono::milliseconds how_long, LauncherSignals& signals) {
  const auto until = std::chrono::steady_clock::now() + how_long;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{signals.fd(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000))) > 0) {
      if (const int sig = signals.drain().termination) throw Interrupted{sig};
    }
  }
}

// Elastic (--nnodes MIN:MAX; docs/elastic.md): one generation after another, each with
// the nodes its rendezvous admitted, until one ends ok, the job is stopped or preempted,
// or the rendezvous refuses (too few nodes, --max-restarts used up). Recovery is from
// the newest checkpoint: the workers restart at the new world size.
int run_generations(const LaunchOptions& o, JobStore& store, LauncherSignals& signals, Console& console,
                    const std::string& program) {
  LaunchOptions go = o;
  std::optional<std::chrono::steady_clock::time_point> ended_at;  // of the generation before
  std::string history;
  const auto record = [&](int g, const std::string& how) {
    history += (history.empty() ? "" : "; ") + std::string("generation ") + std::to_string(g) + ": " +
               std::to_string(go.nnodes) + " node(s), " + how;
  };
  int g = 0;
  int own_failures = 0;  // generations in a row whose first failure was this node's rank
  try {
    for (;; ++g) {
      const Generation gen = store.join_generation(g);
      g = gen.number;
      go.nnodes = static_cast<int>(gen.members.size());
      go.node_rank = gen.node_rank;
      go.master_addr = gen.members.front().addr;
      spdlog::info("generation {}: {} node(s) ({}); this is node {}, ranks {}..{} of {}{}{}{}", g, go.nnodes,
                   [&] {
                     std::string s;
                     for (const auto& m : gen.members) s += (s.empty() ? "" : ", ") + m.host;
                     return s;
                   }(),
                   go.node_rank, go.global_rank(0), go.global_rank(go.nproc_per_node - 1), go.world_size(),
                   gen.change.empty() ? "" : "; " + gen.change,
                   ended_at ? "; formed " + seconds_since(*ended_at) + " after generation " + std::to_string(g - 1) +
                                  " ended"
                            : "",
                   g > 0 ? " (membership changes " + std::to_string(gen.membership_changes) + ", failure restarts " +
                               std::to_string(gen.failure_restarts) + " of --max-restarts " +
                               std::to_string(o.max_restarts) + ")"
                         : "");
      const AttemptEnd end = run_attempt(go, store, signals, console, program, g);
      ended_at = std::chrono::steady_clock::now();
      if (end.kind == AttemptEnd::Kind::ok) {
        record(g, "ok");
        spdlog::info("elastic history: {}", history);
        close_job(go, store, g);
        return 0;
      }
      if (end.kind == AttemptEnd::Kind::resume && !store.preempted(g)) {
        record(g, "stopped at a checkpoint to admit joining nodes");
        continue;
      }
      if (end.kind == AttemptEnd::Kind::resume) {
        record(g, "preempted (exit 75)");
        spdlog::info("elastic history: {}", history);
        spdlog::warn("the job stopped to be resumed: every rank exited {} after writing its checkpoint; no restart "
                     "(run the same command with --resume auto to go on)",
                     kExitStoppedToResume);
        close_job(go, store, g);
        return kExitStoppedToResume;
      }
      const Failure& f = *end.first_failure;
      print_block("generation " + std::to_string(g) + " failed: " + report(f));
      record(g, "failed");
      // Failing first twice in a row marks this node as the likely cause: it sits out.
      own_failures = f.rank >= 0 && f.node == go.node_rank ? own_failures + 1 : 0;
      if (end.kind == AttemptEnd::Kind::stopped) {
        spdlog::info("elastic history: {}", history);
        if (!end.store_lost) close_job(go, store, g);
        return end.interrupted_by ? 128 + end.interrupted_by : 1;
      }
      if (end.store_lost) {
        spdlog::warn("reconnecting to the store at {} (up to {:.0f} s){}", store.where(),
                     o.rdzv_timeout.count() / 1000.0,
                     o.external_store() ? ""
                                        : ": the store is node 0's, so if node 0 is gone the job ends here (serve "
                                          "the store with tandem-store and --rdzv-endpoint to survive any node)");
        store.reconnect();
      }
      if (own_failures >= kFailuresBeforeCooldown && o.node_cooldown.count() > 0 &&
          end.kind == AttemptEnd::Kind::failed) {
        spdlog::warn("this node's ranks failed first in {} generations in a row: it sits out for {:.0f} s "
                     "(--node-cooldown-s), then asks to join again",
                     own_failures, o.node_cooldown.count() / 1000.0);
        sit_out(o.node_cooldown, signals);
        own_failures = 0;
        continue;
      }
      spdlog::warn("forming generation {} from the nodes still there (--nnodes {}:{})", g + 1, o.nnodes_min,
                   o.nnodes_max);
    }
  } catch (const JobOver& e) {
    spdlog::info("{}; nothing to do", e.why);
    return 0;
  } catch (const Interrupted& i) {
    spdlog::warn("received {} during the rendezvous; stopping", signal_name(i.signal));
    return 128 + i.signal;
  } catch (const RendezvousError& e) {
    if (!history.empty()) spdlog::info("elastic history: {}", history);
    spdlog::error("{}{}", e.what(),
                  o.external_store() || o.hosts_store() ? ""
                  : " (with the store on node 0, an elastic job cannot outlive node 0; see docs/elastic.md)");
    return signals.first_termination() ? 128 + signals.first_termination() : 1;
  }
}

int run(const LaunchOptions& flags, LauncherSignals& signals, Console& console) {
  std::string program;
  try {
    program = resolve_program(flags.command[0]);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  LaunchOptions o = flags;
  if (o.hang_timeout.count() > 0) {
    // Heartbeats come only from Tandem's collectives: watching a program that sends none
    // would report a hang (and SIGUSR2 it) however well it runs.
    const ProgramKind kind = program_kind(program);
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
      console, options->nnodes > 1 ? "tandemrun[node " + std::to_string(options->node_rank) + "]: " : "tandemrun: "));
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
