// An elastic job's generations (see header).
#include "launcher/elastic_job.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "collectives/init.h"
#include "launcher/failure.h"
#include "launcher/job_end.h"
#include "launcher/supervisor.h"
#include "launcher/worker_process.h"

namespace tandem::launcher {

namespace {

std::string seconds_since(std::chrono::steady_clock::time_point t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  return text;
}

constexpr int kFailuresBeforeCooldown = 2;

// The node's directory of its workers' in-memory commits (--elastic-recovery memory):
// /dev/shm/tandem-commit-<job>-<pid> (tmpfs, so RAM; the system's temporary directory
// where there is no /dev/shm), removed when tandemrun ends. A node killed outright leaves
// its directory behind: every tandemrun of the job sweeps those of dead tandemruns on its
// machine when it starts and when it ends.
class CommitRoot {
 public:
  explicit CommitRoot(const std::string& job_id) {
    std::string job;
    for (char ch : job_id) job += std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ? ch : '_';
    std::error_code ec;
    parent_ = std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0
                  ? std::filesystem::path("/dev/shm")
                  : std::filesystem::temp_directory_path();
    prefix_ = "tandem-commit-" + job + "-";
    sweep();
    path_ = (parent_ / (prefix_ + std::to_string(getpid()))).string();
    std::filesystem::create_directories(path_, ec);
    if (ec) throw std::runtime_error("cannot create the commit directory " + path_ + ": " + ec.message());
  }
  ~CommitRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    sweep();
  }
  CommitRoot(const CommitRoot&) = delete;
  CommitRoot& operator=(const CommitRoot&) = delete;
  const std::string& path() const { return path_; }

 private:
  void sweep() const {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(parent_, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix_, 0) != 0) continue;
      const std::string pid_text = name.substr(prefix_.size());
      if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
      const long pid = std::stol(pid_text);
      if (pid > 0 && !alive(static_cast<pid_t>(pid))) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  }
  // Not a zombie either: a tandemrun killed outright stays one until its parent reaps it.
  static bool alive(pid_t pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
  }
  std::filesystem::path parent_;
  std::string prefix_, path_;
};

// The workers kept between generations; killed when the job does not go on.
struct Kept {
  std::vector<KeptWorker> workers;
  ~Kept() { release_kept(workers); }
};

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

// This node's record of the job's generations: one log line at the end, and with --log-dir
// DIR/elastic.json (written whole at each end, so a reader never sees half of it).
class History {
 public:
  explicit History(const LaunchOptions& o) : o_(o) {}

  void begin(const Generation& gen, const LaunchOptions& go, std::optional<double> formed_after_s) {
    nlohmann::json hosts = nlohmann::json::array();
    for (const auto& m : gen.members) hosts.push_back(m.host);
    generations_.push_back({{"generation", gen.number}, {"nodes", hosts}, {"node_rank", go.node_rank},
                            {"world_size", go.world_size()}, {"change", gen.change},
                            {"membership_changes", gen.membership_changes},
                            {"failure_restarts", gen.failure_restarts},
                            {"formed_after_s", formed_after_s ? nlohmann::json(*formed_after_s) : nlohmann::json()},
                            {"outcome", nullptr}});
  }
  void end(const std::string& outcome) { generations_.back()["outcome"] = outcome; }

  // The workers' copy (TANDEM_ELASTIC_HISTORY): per generation, its number, node count,
  // world size, change and formed_after_s; the newest kKeptForWorkers only.
  std::string for_workers() const {
    constexpr size_t kKeptForWorkers = 32;
    nlohmann::json out = nlohmann::json::array();
    const size_t from = generations_.size() > kKeptForWorkers ? generations_.size() - kKeptForWorkers : 0;
    for (size_t i = from; i < generations_.size(); ++i) {
      const auto& g = generations_[i];
      out.push_back({{"generation", g["generation"]}, {"nodes", g["nodes"].size()}, {"world_size", g["world_size"]},
                     {"change", g["change"]}, {"formed_after_s", g["formed_after_s"]}});
    }
    return out.dump();
  }

  // Logs the history and writes the file; returns `code`, tandemrun's exit code.
  int finish(int code) {
    std::string line;
    for (const auto& g : generations_) {
      line += (line.empty() ? "" : "; ") + std::string("generation ") + std::to_string(g["generation"].get<int>()) +
              ": " + std::to_string(g["nodes"].size()) + " node(s), " +
              (g["outcome"].is_null() ? std::string("not run to its end") : g["outcome"].get<std::string>());
    }
    if (!line.empty()) spdlog::info("elastic history: {}", line);
    if (o_.log_dir.empty()) return code;
    const std::string path = o_.log_dir + "/elastic.json";
    const nlohmann::json doc = {{"job_id", o_.job_id}, {"host", this_host()}, {"exit_code", code},
                                {"generations", generations_}};
    std::error_code ec;
    std::filesystem::create_directories(o_.log_dir, ec);
    std::ofstream out(path + ".tmp");
    out << doc.dump(2) << "\n";
    out.close();
    if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      spdlog::warn("could not write {}", path);
    }
    return code;
  }

 private:
  const LaunchOptions& o_;
  nlohmann::json generations_ = nlohmann::json::array();
};

}  // namespace

int run_generations(const LaunchOptions& o, JobStore& store, LauncherSignals& signals, Console& console,
                    const std::string& program) {
  LaunchOptions go = o;
  std::optional<CommitRoot> commits;
  if (o.recovers_in_memory()) {
    commits.emplace(o.job_id);
    go.commit_root = commits->path();
  }
  Kept kept;  // destroyed before `commits`: the workers go before their directory
  std::optional<std::chrono::steady_clock::time_point> ended_at;  // of the generation before
  History history(o);
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
      history.begin(gen, go,
                    ended_at ? std::optional<double>(std::chrono::duration<double>(
                                                         std::chrono::steady_clock::now() - *ended_at)
                                                         .count())
                             : std::nullopt);
      go.elastic_history = history.for_workers();
      const AttemptEnd end = run_attempt(go, store, signals, console, program, g, &kept.workers);
      ended_at = std::chrono::steady_clock::now();
      if (end.kind == AttemptEnd::Kind::ok) {
        history.end("ok");
        close_job(go, store, g);
        return history.finish(0);
      }
      if (end.kind == AttemptEnd::Kind::resume && !store.preempted(g)) {
        history.end(kept.workers.empty() ? "stopped at a checkpoint to admit joining nodes"
                                         : "paused at a commit to admit joining nodes");
        continue;
      }
      if (end.kind != AttemptEnd::Kind::failed) release_kept(kept.workers);
      if (end.kind == AttemptEnd::Kind::resume) {
        history.end("preempted (exit 75)");
        spdlog::warn("the job stopped to be resumed: every rank exited {} after writing its checkpoint; no restart "
                     "(run the same command with --resume auto to go on)",
                     kExitStoppedToResume);
        close_job(go, store, g);
        return history.finish(kExitStoppedToResume);
      }
      const Failure& f = *end.first_failure;
      print_block("generation " + std::to_string(g) + " failed: " + report(f));
      history.end(end.kind == AttemptEnd::Kind::stopped ? "stopped" : "failed");
      // Failing first twice in a row marks this node as the likely cause: it sits out.
      own_failures = f.rank >= 0 && f.node == go.node_rank ? own_failures + 1 : 0;
      if (end.kind == AttemptEnd::Kind::stopped) {
        if (!end.store_lost) close_job(go, store, g);
        return history.finish(end.interrupted_by ? 128 + end.interrupted_by : 1);
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
    return history.finish(0);
  } catch (const Interrupted& i) {
    spdlog::warn("received {} during the rendezvous; stopping", signal_name(i.signal));
    return history.finish(128 + i.signal);
  } catch (const RendezvousError& e) {
    spdlog::error("{}{}", e.what(),
                  o.external_store() || o.hosts_store() ? ""
                  : " (with the store on node 0, an elastic job cannot outlive node 0; see docs/elastic.md)");
    return history.finish(signals.first_termination() ? 128 + signals.first_termination() : 1);
  }
}

}  // namespace tandem::launcher
