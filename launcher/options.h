// tandemrun's command line (docs/reference.md, `tandemrun`): parsing and validation.
// Invariant: a LaunchOptions that parse_options returns is complete and consistent
// (node rank < nodes, filter ranks < world size, a program to run, a job id), so the
// rest of the launcher never re-checks flags; every refusal is a UsageError whose
// message names the flag.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::launcher {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  int nproc_per_node = 1;
  // Nodes in the job. With --nnodes MIN:MAX (elastic) it is the current generation's
  // count, set by the rendezvous each time (launcher/rendezvous.h); MAX before that.
  int nnodes = 1;
  // This node's rank, 0..nnodes-1. Elastic: assigned by each generation's rendezvous
  // (oldest member first); -1 until then, 0 on the node that hosts the store.
  int node_rank = 0;
  // --nnodes MIN:MAX: the job runs on any count in MIN..MAX and goes on when nodes leave
  // or join (docs/elastic.md). Both 0 for a fixed --nnodes N.
  int nnodes_min = 0;
  int nnodes_max = 0;
  // --rdzv-last-call-s: an elastic rendezvous with MIN but fewer than MAX nodes waits
  // this long for more before it closes.
  std::chrono::milliseconds rdzv_last_call{std::chrono::seconds(5)};
  // --node-cooldown-s: an elastic node whose ranks were the first failure of two
  // generations in a row sits out this long before asking to join again (0: never).
  std::chrono::milliseconds node_cooldown{std::chrono::seconds(60)};
  // --elastic-recovery: on a change of membership, keep the workers that can (they say so
  // on their control socket) and roll them back to their in-memory commit (memory), or
  // restart every worker from the newest checkpoint (checkpoint). docs/elastic.md.
  enum class Recovery { memory, checkpoint };
  Recovery recovery = Recovery::memory;
  bool recovers_in_memory() const { return elastic() && recovery == Recovery::memory; }
  // Recovery in memory: the node's directory (tmpfs) of its workers' commits, one
  // subdirectory per local rank; made and removed by run_generations, not a flag.
  std::string commit_root;
  // Elastic: the generations so far as compact JSON, handed to the workers as
  // TANDEM_ELASTIC_HISTORY (tandem-train's summary reports it); set by run_generations.
  std::string elastic_history;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: node 0 picks a free one (single node only)
  // Under srun without --master-port: every candidate port, master_port first (node 0
  // hosts the store on the first free one; launcher/slurm_step.h). Empty otherwise.
  std::vector<int> port_candidates;
  std::string slurm_note;  // what was taken from the Slurm step, for the log; "" outside srun
  // --rdzv-endpoint HOST:PORT: the store is served there (tandem-store) and every node,
  // node 0 included, joins it; nobody hosts one. Empty host: node 0 hosts it.
  std::string store_host;
  int store_port = 0;
  int max_restarts = 0;
  std::string log_dir;                  // empty: no log files
  std::optional<std::set<int>> rank_filter;  // absent: every rank reaches the console
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  std::chrono::milliseconds rdzv_timeout{std::chrono::seconds(300)};
  // --hang-timeout-s: end the attempt when no rank completed a training step for this
  // long (0: off). Workers report steps through their heartbeat (collectives/health.h).
  std::chrono::milliseconds hang_timeout{0};
  // The store refuses clients of another job id, so every node must compute the same
  // one: by default it is derived from flags all nodes share (see parse_options).
  std::string job_id;
  std::vector<std::string> command;  // PROGRAM ARGS...
  // --job-secret-file, else TANDEM_JOB_SECRET_FILE; empty: none (launcher/job_secret.h).
  std::string job_secret_file;
  std::string job_secret_file_source;  // "--job-secret-file PATH", for messages
  std::string job_secret;              // filled by prepare_job_secret
  int job_secret_fd = -1;              // the sealed memfd holding it (launcher/job_secret.h)
  // The descriptor the workers inherit: job_secret_fd for a program linked with Tandem, or
  // with --pass-job-secret (or TANDEM_PASS_JOB_SECRET=1); else -1, and no variable names it.
  int worker_secret_fd = -1;
  bool pass_job_secret = false;

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
  bool external_store() const { return !store_host.empty(); }
  bool elastic() const { return nnodes_max > 0; }
  // This tandemrun serves the store: node 0 of a fixed job, or the elastic node started
  // with --node-rank 0; never with --rdzv-endpoint.
  bool hosts_store() const { return !external_store() && node_rank == 0; }
  bool shows_rank(int rank) const { return !rank_filter || rank_filter->count(rank) > 0; }
};

// "20001, 20002": candidate ports, for messages.
std::string port_list(const std::vector<int>& ports);

// "HOST:PORT" or "[IPV6]:PORT" -> {host, port}; `flag` names the flag in the UsageError.
std::pair<std::string, int> parse_endpoint(const std::string& flag, const std::string& text);

// Returns nullopt after printing --help (exit 0). Throws UsageError (exit 2).
std::optional<LaunchOptions> parse_options(int argc, char** argv);

// Number of CUDA devices this process may use (CUDA_VISIBLE_DEVICES applies), probed in
// a short-lived child so the launcher itself never holds a CUDA context. On 0, `why`
// says what was found.
int visible_cuda_devices(std::string& why);

}  // namespace tandem::launcher
