// Hosting and joining the job's store; the per-attempt start barrier (see header).
#include "launcher/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "collectives/untrusted_text.h"
#include "launcher/failure.h"
#include "launcher/worker_process.h"

namespace tandem::launcher {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Waits are cut into slices this long so a termination signal is noticed promptly.
constexpr milliseconds kSlice{1000};
// A store that does not answer a plain call within this is treated as lost (bounds how
// long a node cut off from node 0 takes to notice).
constexpr milliseconds kOpTimeout{std::chrono::seconds(10)};

milliseconds left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::string seconds_text(milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms / 1000.0) + " s";
}

// "a0/ready/1" -> "1"
std::string node_of(const std::string& key) { return key.substr(key.rfind('/') + 1); }

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

bool is_connect_failure(const StoreError& e) {
  // A store not (yet) up is StoreUnreachable; every other StoreError from the
  // constructor is a refusal that retrying cannot fix.
  return dynamic_cast<const StoreUnreachable*>(&e) != nullptr;
}

// A TCP port free on every address of this host: the kernel's pick for a wildcard bind,
// released at once for rank 0 to take. Another process could take it in between, as
// with any port chosen ahead; rank 0 then fails to bind, naming the port.
int free_port(bool ipv6) {
  const int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw RendezvousError(std::string("cannot pick a free MASTER_PORT: socket: ") + std::strerror(errno));
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (ipv6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    len = sizeof(sockaddr_in6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
  }
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(ipv6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  const int err = errno;
  close(fd);
  if (port <= 0) throw RendezvousError(std::string("cannot pick a free MASTER_PORT: bind: ") + std::strerror(err));
  return port;
}

}  // namespace

JobStore::JobStore(const LaunchOptions& options, std::function<int()> poll_signal)
    : options_(options), poll_signal_(std::move(poll_signal)), nnodes_(options.nnodes), node_rank_(options.node_rank) {
  const bool ipv6 = options_.master_addr.find(':') != std::string::npos;
  // Under srun the port is one of several candidates (launcher/slurm_step.h): node 0
  // takes the first it can bind, the others find it by trying each in turn.
  ports_ = options_.port_candidates.empty() ? std::vector<int>{options_.master_port} : options_.port_candidates;
  if (options_.external_store()) {
    ports_ = {options_.store_port};  // tandem-store serves it; every node only joins
    port_ = options_.store_port;
  } else if (options_.hosts_store()) {
    StoreServerOptions so;
    so.bind_addr = ipv6 ? "::" : "0.0.0.0";
    so.job_id = options_.job_id;
    so.secret = options_.job_secret;
    for (size_t k = 0; !server_; ++k) {
      so.port = ports_[k];
      try {
        server_ = std::make_unique<StoreServer>(so);
      } catch (const StoreError& e) {
        if (k + 1 == ports_.size()) {
          throw RendezvousError("node 0 cannot host the store for job " + options_.job_id + " on " +
                                (ports_.size() > 1 ? "any of ports " + port_list(ports_) : "--master-port " +
                                                                                          std::to_string(so.port)) +
                                ": " + e.what());
        }
        spdlog::info("store: port {} is taken ({}); trying {}", so.port, e.what(), ports_[k + 1]);
      }
    }
    port_ = server_->port();
    ports_ = {port_};
  } else {
    port_ = ports_.front();
  }
  connect();
}

JobStore::~JobStore() {
  store_.reset();
  server_.reset();
}

std::string JobStore::where() const {
  const std::string& host = options_.external_store() ? options_.store_host : options_.master_addr;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port_);
}

void JobStore::check_signal() {
  if (const int sig = poll_signal_()) throw Interrupted{sig};
}

void JobStore::connect() {
  TcpStoreOptions to;
  // Node 0 reaches its own store over loopback, whatever --master-addr resolves to here.
  const bool ipv6 = options_.master_addr.find(':') != std::string::npos;
  to.host = options_.external_store() ? options_.store_host
            : options_.hosts_store()   ? (ipv6 ? "::1" : "127.0.0.1")
                                       : options_.master_addr;
  to.job_id = options_.job_id;
  to.secret = options_.job_secret;
  to.op_timeout = kOpTimeout;
  const auto deadline = Clock::now() + options_.rdzv_timeout;
  // With several candidate ports each gets a short turn; a store that refuses this job
  // (another job's, on a candidate it took first) is struck off.
  const milliseconds turn = ports_.size() > 1 ? milliseconds(200) : kSlice;
  std::vector<std::string> refusals(ports_.size());
  for (size_t k = 0;; k = (k + 1) % ports_.size()) {
    if (!refusals[k].empty()) continue;
    port_ = to.port = ports_[k];
    to.connect_timeout = std::max(milliseconds(100), std::min(turn, left(deadline)));
    try {
      base_ = std::make_shared<TcpStore>(to);
      store_ = std::make_shared<PrefixStore>("tandemrun/", base_);
      return;
    } catch (const StoreError& e) {
      if (!is_connect_failure(e)) {
        refusals[k] = e.what();
        if (std::count(refusals.begin(), refusals.end(), std::string()) == 0) {
          throw RendezvousError("the store at " + where() + " refused " +
                                (options_.node_rank >= 0 ? "node " + std::to_string(options_.node_rank) : "this node") +
                                ": " + e.what() +
                                (ports_.size() > 1 ? " (as did every candidate port: " + port_list(ports_) + ")"
                                 : options_.external_store()
                                     ? " (give tandemrun the --job-id and job secret the tandem-store there was "
                                       "started with)"
                                     : " (another job is using this address: give it another "
                                       "--master-port, or the same --job-id as the job you meant to join)"));
        }
        continue;
      }
      if (Clock::now() >= deadline && options_.external_store()) {
        throw RendezvousError("the store at " + where() + " did not answer within " +
                              seconds_text(options_.rdzv_timeout) +
                              " (is tandem-store running there, and reachable from this node?): " + e.what());
      }
      if (Clock::now() >= deadline) {
        throw RendezvousError("node 0 did not join: its store at " + options_.master_addr + " port " +
                              port_list(ports_) + " did not answer within " + seconds_text(options_.rdzv_timeout) +
                              " (is node 0's tandemrun running, with the same --master-addr and --master-port?): " +
                              e.what());
      }
    }
    check_signal();
  }
}

std::string JobStore::key(int attempt, const std::string& name) const {
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "a" + std::to_string(..).
  std::string k = "a";
  k += std::to_string(attempt);
  k += '/';
  k += name;
  return k;
}

void JobStore::register_node() {
  // A long-lived tandem-store may still hold an earlier run of this job id; its keys
  // (the start decisions, the outcomes) would mislead this run, so it is refused.
  if (auto ended = store_->try_get("ended")) {
    throw RendezvousError("job " + options_.job_id + " already ran to its end on the store at " + where() + " (" +
                          *ended + "); a store serves one run of a job: give this run a new --job-id (and "
                          "tandem-store the same), or restart tandem-store");
  }
  const std::string config = "--nnodes " +
                             (options_.elastic() ? std::to_string(options_.nnodes_min) + ":" +
                                                       std::to_string(options_.nnodes_max)
                                                 : std::to_string(options_.nnodes)) +
                             " --nproc-per-node " +
                             std::to_string(options_.nproc_per_node) + " --max-restarts " +
                             std::to_string(options_.max_restarts);
  const std::string held = store_->compare_set("config", "", config);
  if (held != config) {
    throw RendezvousError((options_.node_rank >= 0 ? "node " + std::to_string(options_.node_rank) : "this node") +
                          " was started with " + config +
                          " but the job's other nodes with " + held + "; every node needs the same flags");
  }
  const std::string me = this_host() + " pid " + std::to_string(getpid());
  if (options_.elastic() && !options_.hosts_store()) {
    elastic_id_ = store_->add("seq", 1);  // the store's host is 0; the others count from 1
    return;
  }
  if (options_.elastic()) elastic_id_ = 0;
  const std::string holder = store_->compare_set("node/" + std::to_string(options_.node_rank), "", me);
  if (holder != me) {
    throw RendezvousError("node rank " + std::to_string(options_.node_rank) + " is already taken by the tandemrun on " +
                          holder + " (two nodes were given the same --node-rank" +
                          (options_.external_store() ? ", or an earlier run of job " + options_.job_id +
                                                           " that did not end cleanly left its keys in the store: "
                                                           "give this run a new --job-id, or restart tandem-store)"
                                                     : std::string(")")));
  }
}

void JobStore::start_attempt(int attempt) {
  const std::string start_key = key(attempt, "start");
  const std::string me = std::to_string(options_.node_rank);
  store_->set(key(attempt, "ready/" + me), this_host());
  std::string decision;
  try {
    if (options_.node_rank == 0) {
      std::vector<std::string> ready;
      for (int n = 0; n < options_.nnodes; ++n) ready.push_back(key(attempt, "ready/" + std::to_string(n)));
      const auto deadline = Clock::now() + options_.rdzv_timeout;
      while (decision.empty()) {
        try {
          store_->wait(ready, std::min(kSlice, left(deadline)));
          decision = "go";
        } catch (const StoreTimeout& e) {
          if (auto why = store_->try_get("stopped")) {
            decision = "stopped:" + escape_untrusted(*why, kUntrustedMessageBytes);
          } else if (Clock::now() >= deadline) {
            std::vector<std::string> missing;
            for (const auto& k : e.missing_keys) missing.push_back(node_of(k));
            decision = "timeout:" + join(missing);
          }
        }
        if (decision.empty()) {
          if (const int sig = poll_signal_()) {
            // Release the nodes already waiting before leaving.
            store_->compare_set(start_key, "", "stopped:node 0 received " + signal_name(sig));
            throw Interrupted{sig};
          }
        }
      }
      if (decision == "go") {
        // Picked once every node is ready, so it is as fresh as it can be.
        const bool ipv6 = options_.master_addr.find(':') != std::string::npos;
        store_->set(key(attempt, "master_port"), std::to_string(free_port(ipv6)));
      }
      decision = store_->compare_set(start_key, "", decision);
    } else {
      // Node 0 decides within --rdzv-timeout-s of its own start, which came before we
      // could connect; the margin covers a slow store.
      const auto deadline = Clock::now() + options_.rdzv_timeout + std::chrono::seconds(30);
      while (decision.empty()) {
        try {
          decision = store_->get(start_key, std::min(kSlice, left(deadline)));
        } catch (const StoreTimeout&) {
          if (Clock::now() >= deadline) {
            throw RendezvousError("node 0 did not decide whether attempt " + std::to_string(attempt) +
                                  " starts within " + seconds_text(options_.rdzv_timeout) + " (+30 s)");
          }
          if (const int sig = poll_signal_()) {
            publish_stopped("node " + me + " received " + signal_name(sig) + " during the rendezvous");
            throw Interrupted{sig};
          }
        }
      }
    }
  } catch (const StoreTimeout&) {
    throw;
  } catch (const StoreError& e) {
    throw RendezvousError(std::string("lost the store during the rendezvous: ") + e.what());
  }
  if (decision == "go") {
    try {
      master_port_ = std::stoi(store_->get(key(attempt, "master_port"), kOpTimeout));
    } catch (const StoreError& e) {
      throw RendezvousError("could not read the job's MASTER_PORT for attempt " + std::to_string(attempt) +
                            " from the store: " + e.what());
    }
    return;
  }
  if (decision.rfind("timeout:", 0) == 0) {
    const std::string missing = decision.substr(8);
    throw RendezvousError("rendezvous timed out after " + seconds_text(options_.rdzv_timeout) + ": node" +
                          (missing.find(',') != std::string::npos ? "s " : " ") + missing +
                          " of " + std::to_string(options_.nnodes) + " did not join the store at " + where() +
                          (attempt > 0 ? " for attempt " + std::to_string(attempt) : std::string()));
  }
  throw RendezvousError("the job was stopped before attempt " + std::to_string(attempt) +
                        " started: " + decision.substr(decision.find(':') + 1));
}

std::string JobStore::publish_failure(int attempt, const std::string& failure, const std::string& outcome) {
  const std::string first = store_->compare_set(key(attempt, "failure"), "", failure);
  store_->compare_set(key(attempt, "outcome"), "", outcome);
  return first;
}

void JobStore::publish_stopped(const std::string& why) { store_->compare_set("stopped", "", why); }

void JobStore::node_succeeded(int attempt) {
  if (store_->add(key(attempt, "ok_nodes"), 1) == nnodes_) {
    store_->compare_set(key(attempt, "outcome"), "", "ok");
  }
}

std::optional<std::string> JobStore::first_failure(int attempt) { return store_->try_get(key(attempt, "failure")); }

void JobStore::mark_exited(int attempt) {
  store_->set(key(attempt, "exit/" + std::to_string(node_rank_)), this_host());
}

void JobStore::mark_ended(int attempt) {
  store_->compare_set("ended", "", "attempt " + std::to_string(attempt) + " ended; node 0 was " + this_host() +
                                       " pid " + std::to_string(getpid()));
}

std::string JobStore::wait_for_exits(int attempt, milliseconds timeout) {
  std::vector<std::string> keys;
  for (int n = 0; n < nnodes_; ++n) {
    const std::string r = std::to_string(n);
    // Only nodes that joined this attempt will report its end.
    if (store_->check({key(attempt, "ready/" + r)})) keys.push_back(key(attempt, "exit/" + r));
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    try {
      store_->wait(keys, std::min(kSlice, left(deadline)));
      return {};
    } catch (const StoreTimeout& e) {
      if (Clock::now() >= deadline || poll_signal_()) {
        std::vector<std::string> missing;
        for (const auto& k : e.missing_keys) missing.push_back(node_of(k));
        return join(missing);
      }
    }
  }
}

// ---- Elastic generations -------------------------------------------------------------

namespace {

// How often a node in an elastic rendezvous looks at the arrivals (and may close it).
constexpr milliseconds kElasticPoll{200};

std::string describe_members(const std::vector<ElasticMember>& ms) {
  std::string s;
  for (const auto& m : ms) s += (s.empty() ? "" : ", ") + std::string("node id ") + std::to_string(m.id) + " (" + m.host + ")";
  return s;
}

bool has_id(const std::vector<ElasticMember>& ms, int64_t id) {
  return std::any_of(ms.begin(), ms.end(), [id](const ElasticMember& m) { return m.id == id; });
}

}  // namespace

int JobStore::arrivals(int g) { return static_cast<int>(store_->add(key(g, "arrivals"), 0)); }

void JobStore::mark_preempted(int g) { store_->set(key(g, "preempted"), this_host()); }

bool JobStore::preempted(int g) { return store_->check({key(g, "preempted")}); }

void JobStore::mark_left(const std::string& why) { store_->set("left/" + std::to_string(elastic_id_), why); }

std::vector<ElasticMember> JobStore::read_arrivals(int g, int count) {
  std::vector<ElasticMember> out;
  for (int n = 0; n < count; ++n) {
    // A node writes its arrival right after counting itself; one that died in between
    // never does, and one whose record is malformed is not admitted: neither is a member.
    try {
      const ElasticMember m = parse_arrival(store_->get(key(g, "arrival/" + std::to_string(n)), kElasticPoll));
      if (!has_id(out, m.id) && !store_->check({"left/" + std::to_string(m.id)})) out.push_back(m);
    } catch (const StoreTimeout&) {
    } catch (const RecordError& e) {
      spdlog::warn("generation {}: ignoring arrival {}: {}", g, n, e.what());
    }
  }
  return out;
}

// The members of generation g, which was decided "go" (else RendezvousError).
std::vector<ElasticMember> JobStore::members_of(int g) {
  return accept_generation(g, store_->get(key(g, "members"), kOpTimeout)).members;
}

// The closing node's decision for generation g over the nodes that arrived (first come,
// up to MAX), with the job's counts carried from generation g-1.
std::string JobStore::decide_generation(int g, const std::vector<ElasticMember>& arrived) {
  std::vector<ElasticMember> members(arrived.begin(),
                                     arrived.begin() + std::min<size_t>(arrived.size(), options_.nnodes_max));
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (g == 0) return go_record(members, 0, 0, "");
  const Generation prev = accept_generation(g - 1, store_->get(key(g - 1, "members"), kOpTimeout));
  std::string change;
  bool left = false;
  for (const auto& m : prev.members) {
    if (!has_id(members, m.id)) {
      change += (change.empty() ? "" : "; ") + std::string("node id ") + std::to_string(m.id) + " (" + m.host + ") left";
      left = true;
    }
  }
  for (const auto& m : members) {
    if (!has_id(prev.members, m.id)) {
      change += (change.empty() ? "" : "; ") + std::string("node id ") + std::to_string(m.id) + " (" + m.host + ") joined";
    }
  }
  int restarts = prev.failure_restarts;
  // A generation that failed while every node stayed is a failure restart; one whose
  // nodes left is a membership change, counted apart from --max-restarts.
  if (store_->try_get(key(g - 1, "outcome")) == std::optional<std::string>("failed") && !left &&
      ++restarts > options_.max_restarts) {
    return end_record("exhausted", "generation " + std::to_string(g - 1) +
                                       " failed with every node still present, and no restart is left "
                                       "(--max-restarts " + std::to_string(options_.max_restarts) +
                                       "): the job failed");
  }
  return go_record(members, restarts, prev.membership_changes + (change.empty() ? 0 : 1), change);
}

Generation JobStore::accept_generation(int g, const std::string& decision) {
  try {
    Decision d = parse_decision(decision, g, elastic_id_, options_.nnodes_max);
    if (d.kind != "go") throw RendezvousError(d.why);
    return d.generation;
  } catch (const RecordError& e) {
    throw RendezvousError(std::string("the store holds a bad rendezvous record: ") + e.what());
  }
}

Generation JobStore::join_generation(int g) {
  try {
    return join_generation_from(g);
  } catch (const Interrupted& i) {
    // Its arrival may be counted already: leaving keeps it out of the decision.
    try {
      mark_left(this_host() + " pid " + std::to_string(getpid()) + " received " + signal_name(i.signal) +
                " during the rendezvous");
    } catch (const StoreError&) {
    }
    throw;
  }
}

Generation JobStore::join_generation_from(int g) {
  try {
    // A node that fell behind (cut off, frozen, a late joiner) skips the generations
    // decided without it; a decision other than "go" ended the job.
    while (auto decided = store_->try_get(key(g, "members"))) {
      accept_generation(g, *decided);
      ++g;
    }
    ElasticMember me{elastic_id_,
                     options_.hosts_store() ? options_.master_addr
                                            : static_cast<const TcpStore&>(*base_).local_address(),
                     this_host()};
    const int n = static_cast<int>(store_->add(key(g, "arrivals"), 1)) - 1;
    store_->set(key(g, "arrival/" + std::to_string(n)), arrival_record(me));
    const std::string decision_key = key(g, "members");
    auto deadline = Clock::now() + options_.rdzv_timeout;
    std::optional<Clock::time_point> min_since;  // when this node first saw MIN arrivals
    bool said_waiting = false;
    for (;;) {
      std::string decision;
      try {
        decision = store_->get(decision_key, kElasticPoll);
      } catch (const StoreTimeout&) {
      }
      if (decision.empty()) {
        check_signal();
        if (auto why = store_->try_get("stopped")) {
          decision = store_->compare_set(
              decision_key, "",
              end_record("stopped", "the job was stopped before generation " + std::to_string(g) + " started: " +
                                        escape_untrusted(*why, kUntrustedMessageBytes)));
        }
      }
      if (decision.empty() && g > 0) {
        const auto before = store_->try_get(key(g - 1, "outcome"));
        if (!before) {
          // Generation g-1 still runs: this node is a joiner, admitted when it ends (its
          // members see the arrival and stop at their next checkpoint if below MAX).
          if (!said_waiting) {
            spdlog::info("generation {} is running; waiting to be admitted to generation {}", g - 1, g);
            said_waiting = true;
          }
          deadline = Clock::now() + options_.rdzv_timeout;
          continue;
        }
        if (*before == "ok") {
          throw JobOver{"the job ended with generation " + std::to_string(g - 1) + " before this node was admitted"};
        }
      }
      if (decision.empty()) {
        const auto arrived = read_arrivals(g, arrivals(g));
        const int count = static_cast<int>(arrived.size());
        if (count >= options_.nnodes_min && !min_since) min_since = Clock::now();
        bool everyone_back = false;
        if (g > 0 && count >= options_.nnodes_min) {
          const auto before = members_of(g - 1);
          everyone_back = std::all_of(before.begin(), before.end(), [&](const ElasticMember& m) {
            return has_id(arrived, m.id) || store_->check({"left/" + std::to_string(m.id)});
          });
        }
        std::string proposal;
        if (count >= options_.nnodes_max || everyone_back ||
            (min_since && Clock::now() - *min_since >= options_.rdzv_last_call)) {
          proposal = decide_generation(g, arrived);
        } else if (Clock::now() >= deadline) {
          proposal = end_record("timeout", "rendezvous timed out after " + seconds_text(options_.rdzv_timeout) +
                                               ": " + std::to_string(count) + " of at least " +
                                               std::to_string(options_.nnodes_min) + " nodes joined generation " +
                                               std::to_string(g) + " at " + where() +
                                               (count > 0 ? " (" + describe_members(arrived) + ")" : std::string()));
        }
        if (!proposal.empty()) decision = store_->compare_set(decision_key, "", proposal);
      }
      if (decision.empty()) continue;
      Generation gen = accept_generation(g, decision);
      if (gen.node_rank < 0) {
        // Closed at MAX without this node: wait for a place in the next one.
        spdlog::info("generation {} started with {} nodes (the most, --nnodes {}:{}) without this node; waiting for a "
                     "place", g, gen.members.size(), options_.nnodes_min, options_.nnodes_max);
        return join_generation_from(g + 1);
      }
      nnodes_ = static_cast<int>(gen.members.size());
      node_rank_ = gen.node_rank;
      store_->set(key(g, "ready/" + std::to_string(node_rank_)), this_host());
      if (node_rank_ == 0) {
        store_->set("generation", std::to_string(g));
        const bool ipv6 = gen.members[0].addr.find(':') != std::string::npos;
        store_->set(key(g, "master_port"), std::to_string(free_port(ipv6)));
      }
      try {
        master_port_ = std::stoi(store_->get(key(g, "master_port"), kOpTimeout));
      } catch (const std::logic_error&) {
        throw RendezvousError("the store holds a bad MASTER_PORT for generation " + std::to_string(g));
      }
      return gen;
    }
  } catch (const StoreTimeout& e) {
    throw RendezvousError(std::string("the store did not answer during the rendezvous: ") + e.what());
  } catch (const StoreError& e) {
    throw RendezvousError(std::string("lost the store during the rendezvous: ") + e.what());
  }
}

}  // namespace tandem::launcher
