// The launchers' side of the store: node 0 hosts it, or with --rdzv-endpoint a
// tandem-store on another host serves it (the workers' process groups rendezvous there
// too); every node's tandemrun joins it, and the nodes agree through it on when an
// attempt starts and how it ended.
//
// Keys, all under "tandemrun/" so they never meet the workers' keys:
//   config              the flags that must match on every node (first node sets it)
//   node/<r>            "host pid" of the tandemrun holding node rank r (refuses a twin)
//   stopped             why the job was stopped by a signal (no further restart)
//   a<k>/ready/<r>      node r is ready to start attempt k
//   a<k>/start          node 0's decision: "go", "timeout:<missing node ranks>", "stopped:<why>"
//   a<k>/master_port    the workers' MASTER_PORT for attempt k: a port free on node 0,
//                       reserved for the job's own processes (set before "go")
//   a<k>/failure        the first failure of attempt k (failure.h JSON; first writer wins)
//   a<k>/outcome        "ok" | "failed" | "stopped": attempt k is over (first writer wins)
//   a<k>/ok_nodes       count of nodes whose workers all exited 0; the last sets outcome "ok"
//   a<k>/exit/<r>       node r has reaped its workers and read the outcome
//   a<k>/alive/<r>      node r's lease, "host pid", rewritten every second while attempt
//                       k runs (--rdzv-endpoint only; launcher/node_lease.h)
//   ended               node 0 closed the job: a later run of the same job id on a
//                       long-lived store is refused instead of reading these keys
// Elastic jobs (--nnodes MIN:MAX; docs/elastic.md): attempt k is generation k, and its
// members are decided by the rendezvous instead of by --node-rank:
//   seq                 hands out node ids, in the order nodes first registered: a
//                       node's seniority (the store's host is id 0)
//   a<g>/arrivals       how many nodes asked to join generation g
//   a<g>/arrival/<n>    the n-th of them: {"id","addr","host"} (JSON)
//   a<g>/members        the decision, first writer wins (JSON): "go" with the members,
//                       oldest first (index = node rank), and the job's counts of
//                       failure restarts and membership changes; or "timeout",
//                       "stopped", "exhausted" with a message. Every joined node may
//                       write it once the rule in join_generation holds, so no node is
//                       the only one who can decide
//   generation          the newest generation decided "go"
//   left/<id>           node id left the job on a termination signal: no rendezvous
//                       waits for it, and an arrival of it is not admitted
// A generation's keys are only read by its members and its joiners: a stale
// generation's are never consulted again, and rejoining is idempotent.
// Invariant: every wait has a deadline and returns at least once a second to look for
// a termination signal, so Ctrl-C works during a rendezvous too.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/store.h"
#include "launcher/elastic_records.h"
#include "launcher/options.h"

namespace tandem::launcher {

// Rendezvous failed (missing nodes, refused by another job's store, port busy...).
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A termination signal arrived while waiting.
struct Interrupted {
  int signal;
};

// The job ended (successfully) before this joining node was admitted.
struct JobOver {
  std::string why;
};


class JobStore {
 public:
  // Node 0 hosts the store (throws RendezvousError naming the port when it is busy) and
  // connects to it, unless --rdzv-endpoint names one; other nodes connect, retrying until --rdzv-timeout-s. `poll_signal`
  // returns a termination signal that arrived (0 if none); seeing one throws Interrupted.
  JobStore(const LaunchOptions& options, std::function<int()> poll_signal);
  ~JobStore();

  int port() const { return port_; }
  // After the store was lost (a network fault): connects again, retrying until
  // --rdzv-timeout-s, so this node can join the next attempt. Throws RendezvousError.
  void reconnect() { connect(); }
  std::string where() const;  // "10.0.0.1:29500", "[fd00::1]:29500"

  // Checks that the nodes agree on the flags, that no other tandemrun holds this node
  // rank and that the job did not already end on this store. Throws RendezvousError.
  void register_node();
  // Returns when node 0 has seen every node ready for `attempt`. Throws RendezvousError
  // naming the missing node ranks after --rdzv-timeout-s, or Interrupted.
  void start_attempt(int attempt);
  // Elastic: joins generation `g`, or the first one after it not yet decided (a node
  // that fell behind catches up), and returns it once closed with this node in it: at
  // MAX nodes; at MIN or more once every member of the generation before has arrived,
  // or --rdzv-last-call-s after MIN arrived; never while the generation before still
  // runs (a joiner waits for its end). Throws RendezvousError (too few nodes within
  // --rdzv-timeout-s, --max-restarts used up, the job stopped), JobOver, Interrupted.
  Generation join_generation(int g);
  // Elastic: a joiner has arrived for the generation after `g` (the key to watch).
  std::string joiner_key(int g) const { return key(g + 1, "arrival/0"); }
  // Elastic: how many nodes have asked to join generation `g`.
  int arrivals(int g);
  // Elastic: the job was preempted (SIGUSR1 from outside) in generation `g`: a "resume"
  // ending is then the job's, not a joiner's admission.
  void mark_preempted(int g);
  bool preempted(int g);
  // Elastic: this node leaves the job (SIGINT/SIGTERM/SIGHUP to its tandemrun): the others
  // go on without it and do not wait for it.
  void mark_left(const std::string& why);
  int64_t elastic_id() const { return elastic_id_; }
  // The workers' MASTER_PORT in the attempt start_attempt began: the port node 0 found
  // free for rank 0 to serve, the same on every node.
  int master_port() const { return master_port_; }

  // Publishes `failure` (JSON) and the outcome ("failed" or "stopped") unless another
  // was first; returns the first failure's JSON.
  std::string publish_failure(int attempt, const std::string& failure, const std::string& outcome);
  // Marks the job stopped by a signal, so node 0 starts no further attempt.
  void publish_stopped(const std::string& why);
  // This node's workers all exited 0; the last node to say so ends the attempt "ok".
  void node_succeeded(int attempt);
  std::optional<std::string> first_failure(int attempt);
  void mark_exited(int attempt);
  // Node 0, at the very end: the job is over (see "ended" above).
  void mark_ended(int attempt);
  // Node 0, before closing the store: waits (bounded by `timeout`) until every node
  // that joined `attempt` has read its outcome. Returns the nodes that did not.
  std::string wait_for_exits(int attempt, std::chrono::milliseconds timeout);

  std::string outcome_key(int attempt) const { return key(attempt, "outcome"); }
  // A new connection, for a thread that blocks on the store. The store is up (we are
  // connected), so a short connect timeout only guards against a node 0 just gone.
  std::shared_ptr<Store> connection() const { return store_->clone(std::chrono::seconds(10)); }
  // The same, without the "tandemrun/" prefix: for the workers' keys (health, flight/).
  std::shared_ptr<Store> workers_connection() const { return base_->clone(std::chrono::seconds(10)); }

 private:
  std::string key(int attempt, const std::string& name) const;
  void check_signal();
  void connect();
  std::vector<ElasticMember> read_arrivals(int g, int count);
  std::string decide_generation(int g, const std::vector<ElasticMember>& arrived);
  Generation accept_generation(int g, const std::string& decision);
  std::vector<ElasticMember> members_of(int g);
  Generation join_generation_from(int g);

  const LaunchOptions& options_;
  std::function<int()> poll_signal_;
  std::unique_ptr<StoreServer> server_;  // node 0 only
  std::shared_ptr<Store> base_;         // unprefixed: the workers' keys
  std::shared_ptr<Store> store_;        // prefixed "tandemrun/"
  std::vector<int> ports_;  // the candidates until node 0 binds or a node connects
  int port_ = 0;
  int master_port_ = 0;
  // The attempt's node count and this node's rank in it: the flags', or the generation's.
  int nnodes_ = 0;
  int node_rank_ = 0;
  int64_t elastic_id_ = -1;  // this node's seniority (elastic)
};

}  // namespace tandem::launcher
