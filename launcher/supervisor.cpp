// The per-attempt main loop (see header).
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <spdlog/spdlog.h>
#include <vector>

#include "collectives/init.h"
#include "launcher/health_watch.h"
#include "launcher/outcome_watcher.h"
#include "launcher/output_mux.h"
#include "launcher/worker_env.h"
#include "launcher/worker_process.h"

namespace tandem::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Wake-up period of the main loop when nothing is due; nothing waits for it: every
// event has its own fd.
constexpr milliseconds kIdleWake{1000};
// After the workers are reaped, how long to keep reading pipes that a stray
// descendant outside the worker's group may still hold open.
constexpr milliseconds kDrainLimit{1000};
// --rdzv-endpoint: a node whose heartbeat (written every second) is older than this is
// reported lost. As long as the store's own call timeout (rendezvous.cpp), so a node cut
// off from the store has noticed by then as well.
constexpr milliseconds kNodeLostAfter{std::chrono::seconds(10)};

struct LocalWorker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool alive = false;      // running and part of this attempt (false once exited or held)
  bool resumable = false;  // exited kExitStoppedToResume (or paused): not a failure unless its peers differ
  // Elastic recovery in memory (train/elastic_worker.h): tandemrun's end of the worker's
  // control socket, what arrived of its next line, whether it said hello, and whether it
  // is held: alive, waiting there for the next generation.
  int control_fd = -1;
  std::string control_in;
  bool hello = false;
  bool held = false;
};

// Writes all of `text` to a worker's control socket; false when the worker is gone.
bool send_control(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
      continue;
    }
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The outcome of an attempt whose every worker stopped to be resumed.
constexpr const char* kOutcomeResume = "resume";

class Attempt {
 public:
  Attempt(const LaunchOptions& o, JobStore& store, LauncherSignals& signals, Console& console,
          const std::string& program, int attempt, std::vector<KeptWorker>* kept)
      : o_(o),
        store_(store),
        signals_(signals),
        console_(console),
        program_(program),
        attempt_(attempt),
        host_(this_host()),
        kept_(kept) {}
  ~Attempt() {
    for (const auto& w : workers_)
      if (w.control_fd >= 0 && !w.held) close(w.control_fd);
  }

  AttemptEnd run();

 private:
  void spawn_all();
  bool adopt(LocalWorker& w);
  void spawn(LocalWorker& w);
  void on_control(LocalWorker& w);
  void on_held(LocalWorker& w, const std::string& message);
  void reap();
  void on_worker_exit(LocalWorker& w, int status);
  void on_termination_signal(int sig);
  void on_forwarded_signal(int sig);
  void on_all_exited();
  void on_outcome(const OutcomeWatcher::Result& r);
  void on_health(const HealthWatch::Events& e);
  void on_joiner();
  // The failure of one local rank: who, where, and its stderr tail.
  Failure rank_failure(const LocalWorker& w) const;
  void publish(const Failure& f, const std::string& outcome);
  // keep: a stop after a failure, under recovery in memory: workers that said hello are
  // left to report "lost" (and are kept) rather than signalled.
  void begin_stop(int sig, bool keep = false);
  void kill_remaining();
  bool all_reaped() const;
  void drain_after_exit();
  AttemptEnd result();

  const LaunchOptions& o_;
  JobStore& store_;
  LauncherSignals& signals_;
  Console& console_;
  const std::string& program_;
  const int attempt_;
  const std::string host_;
  std::vector<KeptWorker>* const kept_;

  std::unique_ptr<OutputMux> mux_;
  std::unique_ptr<OutcomeWatcher> watcher_;
  std::unique_ptr<OutcomeWatcher> joiner_watcher_;  // elastic, below MAX: a node asks to join
  std::unique_ptr<HealthWatch> health_;
  std::vector<LocalWorker> workers_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
  bool reported_ok_ = false;
  std::optional<std::string> outcome_;
  std::optional<Failure> local_failure_;
  int interrupted_by_ = 0;
  std::string store_error_;
};

void Attempt::spawn_all() {
  int adopted = 0;
  for (int lr = 0; lr < o_.nproc_per_node; ++lr) {
    LocalWorker w;
    w.local_rank = lr;
    w.rank = o_.global_rank(lr);
    try {
      if (adopt(w)) {
        ++adopted;
      } else {
        spawn(w);
      }
    } catch (const std::exception& e) {
      Failure f;
      f.attempt = attempt_;
      f.node = o_.node_rank;
      f.host = host_;
      f.reason = "node " + std::to_string(o_.node_rank) + " could not start rank " + std::to_string(w.rank) + ": " +
                 e.what();
      local_failure_ = f;
      publish(f, "failed");
      begin_stop(SIGTERM);
      return;
    }
  }
  if (adopted > 0)
    spdlog::info("generation {}: {} of this node's {} worker(s) kept from the generation before (recovery in "
                 "memory: they resume from the oldest member's commit){}",
                 attempt_, adopted, o_.nproc_per_node,
                 adopted < o_.nproc_per_node ? "; the others start afresh and receive it too" : "");
}

// Takes the kept worker of w's local rank, if any, and sends it its place in this
// generation: the variables a new worker would start with, then "go".
bool Attempt::adopt(LocalWorker& w) {
  if (!kept_) return false;
  const auto it = std::find_if(kept_->begin(), kept_->end(), [&](const KeptWorker& k) { return k.local_rank == w.local_rank; });
  if (it == kept_->end()) return false;
  const KeptWorker k = *it;
  kept_->erase(it);
  w.pid = k.pid;
  w.alive = true;
  w.hello = true;
  w.control_fd = k.control_fd;
  workers_.push_back(w);  // from here on, begin_stop reaches it
  LocalWorker& mine = workers_.back();
  if (k.stdout_fd >= 0) mux_->add(mine.rank, StreamKind::out, k.stdout_fd);
  if (k.stderr_fd >= 0) mux_->add(mine.rank, StreamKind::err, k.stderr_fd);
  std::string assignment;
  for (const auto& [name, value] : worker_variables(o_, w.local_rank, attempt_, store_.port(), store_.master_port()))
    assignment += "env " + name + "=" + value + "\n";
  // A worker that died meanwhile is reaped as any exit, and reported.
  if (!send_control(mine.control_fd, assignment + "go\n"))
    spdlog::warn("rank {} (pid {}), kept from the generation before, is gone", mine.rank, mine.pid);
  return true;
}

void Attempt::spawn(LocalWorker& w) {
  auto vars = worker_variables(o_, w.local_rank, attempt_, store_.port(), store_.master_port());
  int pair[2] = {-1, -1};
  if (o_.recovers_in_memory()) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      throw std::runtime_error(std::string("socketpair failed: ") + std::strerror(errno));
    fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    vars.emplace_back("TANDEM_CONTROL_FD", std::to_string(pair[1]));
    vars.emplace_back("TANDEM_COMMIT_DIR", o_.commit_root + "/local" + std::to_string(w.local_rank));
  }
  SpawnedWorker s;
  try {
    s = spawn_worker(program_, o_.command, merged_environment(vars), {o_.worker_secret_fd, pair[1]});
  } catch (...) {
    if (pair[0] >= 0) close(pair[0]);
    if (pair[1] >= 0) close(pair[1]);
    throw;
  }
  if (pair[1] >= 0) close(pair[1]);
  w.pid = s.pid;
  w.alive = true;
  w.control_fd = pair[0];
  workers_.push_back(w);  // from here on, begin_stop reaches it
  try {
    mux_->add(w.rank, StreamKind::out, s.stdout_fd);
  } catch (...) {
    close(s.stderr_fd);
    throw;
  }
  mux_->add(w.rank, StreamKind::err, s.stderr_fd);
}

// A line (or the end) on a worker's control socket.
void Attempt::on_control(LocalWorker& w) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = read(w.control_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // the worker closed it (it exits): its exit is reaped as any
      close(w.control_fd);
      w.control_fd = -1;
      return;
    }
    w.control_in.append(chunk, static_cast<size_t>(n));
  }
  for (size_t nl; (nl = w.control_in.find('\n')) != std::string::npos;) {
    const std::string line = w.control_in.substr(0, nl);
    w.control_in.erase(0, nl + 1);
    if (line == "hello") {
      w.hello = true;
    } else if (line.rfind("lost", 0) == 0 || line.rfind("paused", 0) == 0) {
      on_held(w, line);
    } else {
      spdlog::warn("rank {} sent '{}' on its elastic control socket; ignored", w.rank, line);
    }
  }
}

// The worker waits for the next generation: out of this attempt, but kept alive. "lost" is
// a failure, as the exit it replaces would be; "paused" is a stop to be resumed.
void Attempt::on_held(LocalWorker& w, const std::string& message) {
  if (!w.alive) return;
  w.alive = false;
  w.held = true;
  w.hello = true;
  mux_->drain_rank(w.rank);
  if (message.rfind("paused", 0) == 0) {
    w.resumable = true;
    return;
  }
  if (stopping_) return;  // a consequence of the failure already being handled
  Failure f = rank_failure(w);
  f.reason = "rank " + std::to_string(w.rank) + " " + (message.size() > 5 ? message.substr(5) : std::string()) +
             " (the process is kept for the next generation)";
  local_failure_ = f;
  publish(f, "failed");
  begin_stop(SIGTERM, true);
}

Failure Attempt::rank_failure(const LocalWorker& w) const {
  Failure f;
  f.attempt = attempt_;
  f.node = o_.node_rank;
  f.host = host_;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.pid = w.pid;
  f.stderr_tail = mux_->stderr_tail(w.rank);
  return f;
}

void Attempt::publish(const Failure& f, const std::string& outcome) {
  try {
    store_.publish_failure(attempt_, to_json(f), outcome);
  } catch (const std::exception& e) {
    if (store_error_.empty()) store_error_ = e.what();
  }
  outcome_ = outcome;
}

void Attempt::begin_stop(int sig, bool keep) {
  if (!stopping_) {
    stopping_ = true;
    kill_deadline_ = Clock::now() + o_.grace;
  }
  for (const auto& w : workers_) {
    if (w.alive && !(keep && w.hello && o_.recovers_in_memory())) signal_group(w.pid, sig);
  }
}

void Attempt::kill_remaining() {
  for (const auto& w : workers_) {
    if (w.alive) signal_group(w.pid, SIGKILL);
  }
  killed_ = true;
}

bool Attempt::all_reaped() const {
  for (const auto& w : workers_) {
    if (w.alive) return false;
  }
  return true;
}

void Attempt::reap() {
  std::vector<std::pair<LocalWorker*, int>> exited;
  for (auto& w : workers_) {
    if (!w.alive) continue;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      w.alive = false;
      exited.emplace_back(&w, status);
    }
  }
  // A rank that failed with an exit code, or died of SIGPIPE writing to a socket whose
  // other end is gone, may have seen a killed peer faster than the kernel finished tearing
  // that peer down (the shm backend notices a dead peer within a millisecond, a closed
  // socket is closed before its process becomes reapable, and a large process takes
  // longer). Give such a cause, a death by any other signal, a short bounded moment to
  // show up, so it is the one reported.
  const auto consequence = [](int status) {
    return (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kExitStoppedToResume) ||
           (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE);
  };
  const auto cause = [](int status) { return WIFSIGNALED(status) && WTERMSIG(status) != SIGPIPE; };
  const bool any_cause = std::any_of(exited.begin(), exited.end(), [&](const auto& e) { return cause(e.second); });
  const bool any_consequence =
      std::any_of(exited.begin(), exited.end(), [&](const auto& e) { return consequence(e.second); });
  if (any_consequence && !any_cause && !stopping_) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    bool found = false;
    while (!found && std::chrono::steady_clock::now() < until) {
      poll(nullptr, 0, 2);
      for (auto& w : workers_) {
        if (!w.alive) continue;
        int status = 0;
        if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
          w.alive = false;
          exited.emplace_back(&w, status);
          found |= cause(status);
        }
      }
    }
  }
  // Exits seen in one pass have no order of their own. A death by a signal other than
  // SIGPIPE goes first: when one rank is killed, its peers fail moments later with
  // collective errors (or SIGPIPE), and the kill is the cause worth reporting.
  std::stable_sort(exited.begin(), exited.end(),
                   [&](const auto& a, const auto& b) { return cause(a.second) && !cause(b.second); });
  for (auto& [w, status] : exited) on_worker_exit(*w, status);
}

void Attempt::on_worker_exit(LocalWorker& w, int status) {
  mux_->drain_rank(w.rank);  // so the stderr tail is complete
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  // While stopping, exits are the consequence of our own signals, not failures.
  if (ok || stopping_) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitStoppedToResume) {
    w.resumable = true;  // its peers stop at the same step; on_all_exited decides
    return;
  }
  Failure f = rank_failure(w);
  if (WIFSIGNALED(status)) {
    f.signal = WTERMSIG(status);
  } else {
    f.exit_code = WEXITSTATUS(status);
  }
  local_failure_ = f;
  publish(f, "failed");
  begin_stop(SIGTERM, true);
}

void Attempt::on_termination_signal(int sig) {
  if (interrupted_by_ && stopping_) {
    spdlog::warn("received {} again: killing every worker now", signal_name(sig));
    kill_remaining();
    return;
  }
  if (!interrupted_by_) interrupted_by_ = sig;
  spdlog::warn("received {}: stopping the job (forwarding {} to the workers, SIGKILL after {} ms)",
               signal_name(sig), signal_name(sig), o_.grace.count());
  Failure f;
  f.attempt = attempt_;
  f.node = o_.node_rank;
  f.host = host_;
  // In an elastic job one node's signal takes that node out, not the job: the others form
  // the next generation without it, at once. (The store's host stops the job: the store
  // goes with it.)
  const bool leaves = o_.elastic() && !o_.hosts_store();
  f.reason = "node " + std::to_string(o_.node_rank) + "'s tandemrun (host " + host_ + ") received " +
             signal_name(sig) + (leaves ? " and left the job" : " and stopped the job");
  try {
    if (leaves) {
      store_.mark_left(f.reason);
    } else {
      store_.publish_stopped(f.reason);
    }
  } catch (const std::exception& e) {
    if (store_error_.empty()) store_error_ = e.what();
  }
  publish(f, leaves ? "failed" : "stopped");
  begin_stop(sig);
}

void Attempt::on_forwarded_signal(int sig) {
  if (sig == SIGUSR1 && o_.elastic()) {
    // Preemption from outside (Slurm's --signal): the job stops to be resumed later,
    // not to admit a joiner.
    try {
      store_.mark_preempted(attempt_);
    } catch (const std::exception& e) {
      if (store_error_.empty()) store_error_ = e.what();
    }
  }
  spdlog::warn("received {}: passing it on to the workers, which keep running{}", signal_name(sig),
               sig == SIGUSR1 ? " (tandem-train stops at its next step boundary with a checkpoint, to be resumed)"
                              : "");
  for (const auto& w : workers_) {
    if (w.alive) kill(w.pid, sig);  // the worker only, not its group: the program decides what to pass on
  }
}

void Attempt::on_all_exited() {
  const auto n = std::count_if(workers_.begin(), workers_.end(), [](const LocalWorker& w) { return w.resumable; });
  if (n == 0) {
    try {
      store_.node_succeeded(attempt_);
    } catch (const std::exception& e) {
      store_error_ = e.what();
    }
    return;
  }
  Failure f;
  f.attempt = attempt_;
  f.node = o_.node_rank;
  f.host = host_;
  f.exit_code = kExitStoppedToResume;
  if (n == static_cast<long>(workers_.size())) {
    f.reason = "every rank of node " + std::to_string(o_.node_rank) + " exited " +
               std::to_string(kExitStoppedToResume) + ": stopped to be resumed";
    local_failure_ = f;
    publish(f, kOutcomeResume);
    return;
  }
  // Some stopped to be resumed while others ran to the end: the job is neither done nor
  // resumable as one. The first such rank is the failure to report.
  f = rank_failure(*std::find_if(workers_.begin(), workers_.end(), [](const LocalWorker& x) { return x.resumable; }));
  f.exit_code = kExitStoppedToResume;
  local_failure_ = f;
  publish(f, "failed");
}

void Attempt::on_outcome(const OutcomeWatcher::Result& r) {
  if (!r.error.empty()) {
    if (store_error_.empty()) store_error_ = r.error;
    if (!stopping_) {
      spdlog::error("lost the job's store ({}); stopping this node's workers", r.error);
      begin_stop(SIGTERM);
    }
    return;
  }
  if (!outcome_) outcome_ = r.outcome;
  if (r.outcome == kOutcomeResume && !stopping_) {
    // Another node's ranks stopped to be resumed; ours stop at the same step on their own
    // (tandem-train's ranks agree on it). They get --grace-s to do so, then SIGKILL.
    stopping_ = true;
    kill_deadline_ = Clock::now() + o_.grace;
    return;
  }
  if (r.outcome != "ok" && !stopping_) begin_stop(SIGTERM, r.outcome == "failed");
}

void Attempt::on_health(const HealthWatch::Events& e) {
  if (e.dump_now) {
    for (const auto& w : workers_) {
      if (w.alive) kill(w.pid, SIGUSR2);  // the flight recorder's signal; the worker only, not its group
    }
  }
  const std::optional<std::string>& why = e.hang ? e.hang : e.node_lost;
  if (why && !stopping_ && !outcome_) {
    Failure f;
    f.attempt = attempt_;
    f.node = o_.node_rank;
    f.host = host_;
    f.reason = *why;
    local_failure_ = f;
    publish(f, "failed");
    begin_stop(SIGTERM, true);
  }
}

void Attempt::on_joiner() {
  joiner_watcher_.reset();  // once per generation
  if (stopping_ || outcome_) return;
  int waiting = 0;
  try {
    waiting = store_.arrivals(attempt_ + 1);
  } catch (const std::exception& e) {
    if (store_error_.empty()) store_error_ = e.what();
    return;
  }
  const bool in_memory = o_.recovers_in_memory() &&
                         std::all_of(workers_.begin(), workers_.end(), [](const LocalWorker& w) { return w.hello; });
  spdlog::warn("{} node(s) ask to join (generation {} has {} of at most {} nodes): {}; the job goes on with the new "
               "nodes from there",
               waiting, attempt_, o_.nnodes, o_.nnodes_max,
               in_memory ? "asking the workers to pause at their next commit"
                         : "sending SIGUSR1 to the workers, which stop at their next checkpoint");
  for (const auto& w : workers_) {
    if (!w.alive) continue;
    if (in_memory) {
      send_control(w.control_fd, "pause\n");
    } else {
      kill(w.pid, SIGUSR1);  // the worker only: tandem-train stops with a checkpoint, exit 75
    }
  }
}

void Attempt::drain_after_exit() {
  const auto deadline = Clock::now() + kDrainLimit;
  for (;;) {
    const auto fds = mux_->open_fds();
    if (fds.empty() || Clock::now() >= deadline) break;
    std::vector<pollfd> p;
    for (int fd : fds) p.push_back({fd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (poll(p.data(), p.size(), static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;
    for (const auto& q : p) {
      if (q.revents) mux_->on_readable(q.fd);
    }
  }
  mux_->close_all();
}

AttemptEnd Attempt::run() {
  std::string log_dir;
  if (!o_.log_dir.empty()) {
    log_dir = o_.log_dir + "/attempt" + std::to_string(attempt_);
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    if (ec) throw std::runtime_error("cannot create log directory " + log_dir + ": " + ec.message());
  }
  mux_ = std::make_unique<OutputMux>(console_, o_.node_rank, log_dir, [this](int rank) { return o_.shows_rank(rank); });
  try {
    watcher_ = std::make_unique<OutcomeWatcher>(store_.connection(), store_.outcome_key(attempt_));
  } catch (const std::exception& e) {
    store_error_ = e.what();
    return result();
  }
  try {
    HealthWatch::Options ho;
    ho.node = o_.node_rank;
    ho.world_size = o_.world_size();
    ho.attempt = attempt_;
    ho.hang_timeout = o_.hang_timeout;
    ho.nnodes = o_.nnodes;
    // With the store on its own host a dead node no longer takes the store along: its
    // silent heartbeat is how the other nodes learn of it. An elastic job watches it too,
    // so a frozen or cut-off node ends its generation within kNodeLostAfter rather than
    // the collective timeout (600 s by default) its peers' ranks would wait out.
    if (o_.external_store() || o_.elastic()) ho.node_lost_after = kNodeLostAfter;
    health_ = std::make_unique<HealthWatch>(store_.workers_connection(), ho);
  } catch (const std::exception& e) {
    store_error_ = e.what();
    return result();
  }
  if (o_.elastic() && o_.nnodes < o_.nnodes_max) {
    try {
      joiner_watcher_ = std::make_unique<OutcomeWatcher>(store_.connection(), store_.joiner_key(attempt_));
    } catch (const std::exception& e) {
      store_error_ = e.what();
      return result();
    }
  }
  spawn_all();

  for (;;) {
    reap();
    if (all_reaped()) {
      if (!outcome_ && store_error_.empty() && !local_failure_ && !reported_ok_) {
        reported_ok_ = true;
        on_all_exited();
      }
      if (outcome_ || !store_error_.empty()) break;
    }
    std::vector<pollfd> fds;
    fds.push_back({signals_.fd(), POLLIN, 0});
    fds.push_back({watcher_->fd(), POLLIN, 0});
    fds.push_back({health_->fd(), POLLIN, 0});
    // Always present (fd -1 is ignored by poll) so the pipes start at index 4.
    fds.push_back({joiner_watcher_ ? joiner_watcher_->fd() : -1, POLLIN, 0});
    const std::vector<int> pipes = mux_->open_fds();
    for (int fd : pipes) fds.push_back({fd, POLLIN, 0});
    const size_t controls = fds.size();
    for (const auto& w : workers_) fds.push_back({w.alive ? w.control_fd : -1, POLLIN, 0});
    milliseconds timeout = kIdleWake;
    if (stopping_ && !killed_) {
      timeout = std::min(timeout, std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(
                                                                 kill_deadline_ - Clock::now() + milliseconds(1))));
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    }
    if (fds[0].revents) {
      const auto pending = signals_.drain();
      for (int sig : pending.forward) on_forwarded_signal(sig);
      if (pending.termination) on_termination_signal(pending.termination);
    }
    if (fds[1].revents) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = read(watcher_->fd(), &n, sizeof(n));
      if (auto res = watcher_->result()) on_outcome(*res);
    }
    if (fds[2].revents) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = read(health_->fd(), &n, sizeof(n));
      on_health(health_->take());
    }
    if (fds[3].revents && joiner_watcher_) {
      if (auto res = joiner_watcher_->result(); res && res->error.empty()) {
        on_joiner();
      } else if (res) {
        joiner_watcher_.reset();  // the outcome watcher reports a lost store
      }
    }
    for (size_t i = 4; i < controls; ++i) {
      if (fds[i].revents) mux_->on_readable(fds[i].fd);
    }
    for (size_t i = controls; i < fds.size(); ++i) {
      if (fds[i].revents && fds[i].fd >= 0) on_control(workers_[i - controls]);
    }
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
      bool any = false;
      for (const auto& w : workers_) any = any || w.alive;
      if (any) spdlog::warn("workers still running {} ms after the stop signal: sending SIGKILL", o_.grace.count());
      kill_remaining();
    }
  }
  // Anything left in the workers' groups (their own children) goes now. A group id
  // stays reserved while any member lives, so this cannot reach an unrelated group
  // unless the group is already empty and its id was reused in between (the kernel
  // would have to wrap around its pid space in that time).
  for (auto& w : workers_) {
    if (!w.held) {
      signal_group(w.pid, SIGKILL);
      continue;
    }
    // Kept for the next generation (the caller releases it if there is none).
    const auto [out, err] = mux_->release(w.rank);
    if (kept_) kept_->push_back({w.local_rank, w.pid, w.control_fd, out, err});
  }
  drain_after_exit();
  return result();
}

AttemptEnd Attempt::result() {
  AttemptEnd end;
  end.interrupted_by = interrupted_by_;
  if (!store_error_.empty()) {
    spdlog::error("node {} lost the job's store at {} ({})", o_.node_rank, store_.where(), store_error_);
  }
  end.store_lost = !store_error_.empty() && !outcome_;
  if (outcome_ == "ok" && !end.store_lost) {
    end.kind = AttemptEnd::Kind::ok;
    return end;
  }
  end.kind = outcome_ == "stopped" || interrupted_by_ ? AttemptEnd::Kind::stopped : AttemptEnd::Kind::failed;
  try {
    if (auto first = store_.first_failure(attempt_)) end.first_failure = failure_from_json(*first);
  } catch (const std::exception& e) {
    if (store_error_.empty()) store_error_ = e.what();
  }
  if (!end.first_failure) end.first_failure = local_failure_;
  // The store's first record decides, so every node ends the same way.
  const Failure* first = end.first_failure ? &*end.first_failure : nullptr;
  if (first && first->rank < 0 && first->exit_code == kExitStoppedToResume && !interrupted_by_)
    end.kind = AttemptEnd::Kind::resume;
  if (!end.first_failure) {
    Failure f;
    f.attempt = attempt_;
    f.node = o_.node_rank;
    f.host = host_;
    f.reason = "node " + std::to_string(o_.node_rank) + " lost the job's store at " + store_.where() + " (" +
               store_error_ + (o_.external_store() ? "); the store's host (tandem-store) may be down or cut off"
                                                   : "); node 0's tandemrun may have ended");
    end.first_failure = f;
  }
  return end;
}

}  // namespace

void release_kept(std::vector<KeptWorker>& kept) {
  for (const KeptWorker& k : kept) {
    signal_group(k.pid, SIGKILL);
    int status = 0;
    while (waitpid(k.pid, &status, 0) < 0 && errno == EINTR) {
    }
    for (int fd : {k.control_fd, k.stdout_fd, k.stderr_fd})
      if (fd >= 0) close(fd);
  }
  kept.clear();
}

AttemptEnd run_attempt(const LaunchOptions& options, JobStore& store, LauncherSignals& signals, Console& console,
                       const std::string& program_path, int attempt, std::vector<KeptWorker>* kept) {
  Attempt a(options, store, signals, console, program_path, attempt, kept);
  return a.run();
}

}  // namespace tandem::launcher
