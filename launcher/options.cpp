// Parses tandemrun's flags with CLI11 and checks them against each other.
// The program and its arguments follow `--`, so a program flag such as `--lr` is
// never mistaken for one of ours.
#include "launcher/options.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <tandem/version.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>
#include <tuple>

#include "launcher/slurm_step.h"

namespace tandem::launcher {

namespace {

int parse_int(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const long v = std::stol(text, &used);
    if (used == text.size() && v >= INT32_MIN && v <= INT32_MAX) return static_cast<int>(v);
  } catch (const std::exception&) {
  }
  throw UsageError(flag + ": '" + text + "' is not an integer");
}

std::set<int> parse_rank_list(const std::string& text, int world) {
  std::set<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty()) throw UsageError("--rank-filter: empty item in '" + text + "' (expected e.g. 0 or 0,2)");
    const int r = parse_int("--rank-filter", item);
    if (r < 0 || r >= world) {
      throw UsageError("--rank-filter: rank " + item + " is not in 0.." + std::to_string(world - 1) +
                       " (world size " + std::to_string(world) + ")");
    }
    ranks.insert(r);
    start = comma + 1;
  }
  return ranks;
}

// Far beyond any real wait, and far from overflowing a steady_clock deadline (int64 ns).
constexpr double kMaxSeconds = 1e9;

std::chrono::milliseconds seconds_flag(const std::string& flag, double s, bool allow_zero) {
  if (!std::isfinite(s) || s < 0 || (!allow_zero && s == 0)) {
    throw UsageError(flag + ": " + std::to_string(s) + " must be " + (allow_zero ? ">= 0" : "> 0") +
                     " seconds");
  }
  if (s > kMaxSeconds) throw UsageError(flag + ": " + std::to_string(s) + " must be at most 1e9 seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

// --nnodes N, or MIN:MAX (elastic). Elastic node ranks are the rendezvous's to assign:
// only the node that hosts the store names itself, as --node-rank 0.
void parse_nnodes(const std::string& text, bool node_rank_given, bool endpoint, LaunchOptions& o) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    o.nnodes = parse_int("--nnodes", text);
    return;
  }
  o.nnodes_min = parse_int("--nnodes", text.substr(0, colon));
  o.nnodes_max = parse_int("--nnodes", text.substr(colon + 1));
  if (o.nnodes_min < 1 || o.nnodes_max < o.nnodes_min) {
    throw UsageError("--nnodes " + text + ": MIN:MAX needs 1 <= MIN <= MAX");
  }
  o.nnodes = o.nnodes_max;
  if (endpoint && node_rank_given) {
    throw UsageError("--node-rank: not with --nnodes " + text + " and --rdzv-endpoint: an elastic job's node ranks "
                     "are assigned at each rendezvous (the oldest member is node 0)");
  }
  if (!endpoint && node_rank_given && o.node_rank != 0) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + ": with --nnodes " + text +
                     " node ranks are assigned at each rendezvous; give --node-rank 0 only to the node that hosts "
                     "the store (or serve it with tandem-store and --rdzv-endpoint)");
  }
  // Unassigned until the first rendezvous; the store's host stays node 0 throughout.
  if (!node_rank_given) o.node_rank = -1;
}

}  // namespace

int visible_cuda_devices(std::string& why) {
  // The driver is loaded in a child: a CUDA context (and its threads and device
  // files) in the launcher would be inherited by nothing useful and only cost memory.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    why = std::string("pipe2 failed: ") + std::strerror(errno);
    return 0;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    char msg[256];
    int len = 0;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      len = std::snprintf(msg, sizeof(msg), "E the CUDA driver (libcuda.so.1) is not installed");
    } else {
      using InitFn = int (*)(unsigned);
      using CountFn = int (*)(int*);
      auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
      auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
      int n = 0;
      int rc = init && count ? init(0) : -1;
      if (rc == 0) rc = count(&n);
      len = rc == 0 ? std::snprintf(msg, sizeof(msg), "%d", n)
                    : std::snprintf(msg, sizeof(msg), "E the CUDA driver failed to start (CUresult %d)", rc);
    }
    [[maybe_unused]] ssize_t w = write(fds[1], msg, static_cast<size_t>(len));
    _exit(0);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    why = std::string("fork failed: ") + std::strerror(errno);
    return 0;
  }
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out.empty()) {
    why = "the CUDA probe process died";
    return 0;
  }
  if (out[0] == 'E') {
    why = out.substr(2);
    return 0;
  }
  const int count = std::atoi(out.c_str());
  if (count == 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    why = cvd ? std::string("the CUDA driver reports no device (CUDA_VISIBLE_DEVICES='") + cvd + "')"
              : "the CUDA driver reports no device";
  }
  return count;
}

std::string port_list(const std::vector<int>& ports) {
  std::string s;
  for (int p : ports) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

std::pair<std::string, int> parse_endpoint(const std::string& flag, const std::string& text) {
  const std::string form = " (expected HOST:PORT, or [IPV6]:PORT)";
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw UsageError(flag + ": '" + text + "' is not an address" + form);
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      throw UsageError(flag + ": '" + text + "' is not an address" + form);
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) throw UsageError(flag + ": '" + text + "' has no host" + form);
  const int p = parse_int(flag, port);
  if (p < 1 || p > 65535) throw UsageError(flag + ": port " + port + " is not in 1..65535");
  return {host, p};
}

namespace {

// The flags whose text is checked or converted after parsing (the rest land in
// LaunchOptions directly).
struct RawFlags {
  std::string nproc = "1";
  std::string rank_filter;
  double grace_s = 5;
  double rdzv_timeout_s = 300;
  double hang_timeout_s = 0;
  std::string rdzv_endpoint;
  std::string nnodes = "1";
  double rdzv_last_call_s = 5;
  double node_cooldown_s = 60;
  std::string recovery = "memory";
};

// Declares every flag of `app`, writing into `o` and `r`.
void add_flags(CLI::App& app, LaunchOptions& o, RawFlags& r) {
  app.footer("Everything after -- is the program and its arguments: tandemrun [OPTIONS] -- PROGRAM [ARGS...]\n"
             "Exit codes: 0 success, 1 the job failed, 2 usage error, 75 every worker stopped to be resumed "
             "(SIGUSR1, passed on), 128+N stopped by signal N. "
             "See docs/launching.md.");
  app.add_option("--nproc-per-node", r.nproc, "Processes on this node: a number, or 'gpu' for one per visible GPU")
      ->capture_default_str();
  app.add_option("--nnodes", r.nnodes,
                 "Number of nodes in the job (run by srun: the step's), or MIN:MAX for an elastic job that goes on "
                 "when nodes leave or join (docs/elastic.md)")
      ->capture_default_str();
  app.add_option("--node-rank", o.node_rank,
                 "This node's rank, 0..nnodes-1 (node 0 hosts the store unless --rdzv-endpoint; run by srun: "
                 "SLURM_NODEID). Elastic: ranks are assigned at each rendezvous; give --node-rank 0 only to the "
                 "node that hosts the store")
      ->capture_default_str();
  app.add_option("--rdzv-last-call-s", r.rdzv_last_call_s,
                 "Elastic: once MIN nodes have joined, wait this long for more before starting with fewer than MAX")
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr,
                 "Address of node 0, where the store listens (run by srun: the step's first host)")
      ->capture_default_str();
  app.add_option("--master-port", o.master_port,
                 "Port of tandemrun's store on node 0, TANDEM_STORE_PORT (0: pick a free one; single node only); "
                 "the workers' MASTER_PORT is another port, free on node 0, for the job's rank 0 to serve")
      ->capture_default_str();
  app.add_option("--rdzv-endpoint", r.rdzv_endpoint,
                 "HOST:PORT (or [IPV6]:PORT) of a tandem-store serving this job: every node, node 0 included, "
                 "joins it there and no node hosts one, so the store outlives any node; not with --master-port");
  app.add_option("--max-restarts", o.max_restarts, "Restart the whole job up to K times after a failure (elastic: failures with every node "
                 "still there; membership changes do not count)")
      ->capture_default_str();
  app.add_option("--log-dir", o.log_dir, "Also write DIR/attempt<K>/rank<R>.stdout|.stderr");
  app.add_option("--rank-filter", r.rank_filter, "Only these ranks reach the console, e.g. 0 or 0,2");
  app.add_option("--grace-s", r.grace_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers (elastic, --elastic-recovery memory: "
                 "also how long ranks have to report their broken group after a failure before they are restarted)")
      ->capture_default_str();
  app.add_option("--rdzv-timeout-s", r.rdzv_timeout_s, "Seconds to wait for every node to join")
      ->capture_default_str();
  app.add_option("--node-cooldown-s", r.node_cooldown_s,
                 "Elastic: a node whose ranks failed first in two generations in a row sits out this long before "
                 "asking to join again (0: never)")
      ->capture_default_str();
  app.add_option("--elastic-recovery", r.recovery,
                 "Elastic: on a change of membership keep the workers and roll back to their in-memory commit "
                 "(memory: tandem-train's --commit-every; a program that cannot is restarted), or restart every "
                 "worker from the newest checkpoint (checkpoint)")
      ->check(CLI::IsMember({"memory", "checkpoint"}))
      ->capture_default_str();
  app.add_option("--hang-timeout-s", r.hang_timeout_s,
                 "End (or restart) the job when no rank completed a training step for S seconds; every rank "
                 "dumps its flight recorder first and one analysis is printed (0: off). Needs the heartbeats of "
                 "programs built with Tandem's collectives: for others (python3 ...) it warns and stays off")
      ->capture_default_str();
  app.add_option("--job-id", o.job_id,
                 "Job name, the same on every node; the store refuses other jobs (default: tandem-<master-port>, with "
                 "--rdzv-endpoint tandem-<its port>)");
  app.add_option("--job-secret-file", o.job_secret_file,
                 "File holding the job secret, the same on every node (default: $TANDEM_JOB_SECRET_FILE; a "
                 "single-node job without one makes its own; see docs/security.md)");
  app.add_flag("--pass-job-secret", o.pass_job_secret,
               "Pass the job secret's descriptor to the program even when it is not linked with Tandem (a script or "
               "an interpreter that starts or loads a Tandem program); by default only a Tandem program gets it "
               "(default: $TANDEM_PASS_JOB_SECRET=1 sets it)");
}

}  // namespace

std::optional<LaunchOptions> parse_options(int argc, char** argv) {
  // Split at the first `--`: what follows is the program, untouched.
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      split = i;
      break;
    }
  }
  LaunchOptions o;
  RawFlags r;
  CLI::App app{
      "tandemrun: starts one process per device on every node, hosts the rendezvous store,\n"
      "prefixes every output line with [node:rank], and stops the whole job when one process fails.",
      "tandemrun"};
  add_flags(app, o, r);
  app.set_version_flag("--version", std::string("tandemrun ") + TANDEM_VERSION_STRING, "Print the version and exit");
  try {
    app.parse(split, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::CallForVersion&) {
    std::printf("tandemrun %s\n", TANDEM_VERSION_STRING);
    return std::nullopt;
  } catch (const CLI::ExtrasError& e) {
    throw UsageError(std::string(e.what()) + " (put '--' before the program: tandemrun [options] -- PROGRAM [ARGS...])");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  for (int i = split + 1; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.command.empty() || o.command[0].empty()) {
    throw UsageError("no program given: tandemrun [options] -- PROGRAM [ARGS...]");
  }

  if (r.nproc == "gpu") {
    std::string why;
    o.nproc_per_node = visible_cuda_devices(why);
    if (o.nproc_per_node == 0) throw UsageError("--nproc-per-node gpu: no CUDA GPU is visible: " + why);
  } else {
    o.nproc_per_node = parse_int("--nproc-per-node", r.nproc);
    if (o.nproc_per_node < 1) throw UsageError("--nproc-per-node: must be >= 1 or 'gpu', not " + r.nproc);
  }
  parse_nnodes(r.nnodes, app.count("--node-rank") > 0, app.count("--rdzv-endpoint") > 0, o);
  std::set<std::string> explicit_flags;
  for (const char* flag : {"--nnodes", "--node-rank", "--master-addr", "--master-port", "--job-id"}) {
    if (app.count(flag)) explicit_flags.insert(flag);
  }
  if (app.count("--rdzv-endpoint")) {
    std::tie(o.store_host, o.store_port) = parse_endpoint("--rdzv-endpoint", r.rdzv_endpoint);
    if (app.count("--master-port")) {
      throw UsageError("--master-port: not with --rdzv-endpoint: --master-port is the port of the store node 0 "
                       "hosts, and with --rdzv-endpoint nobody hosts one (the workers' MASTER_PORT is still "
                       "picked free on node 0, as without)");
    }
    explicit_flags.insert("--master-port");  // a Slurm step's candidate ports would name node 0's store
  }
  o.slurm_note = apply_slurm_step(o, explicit_flags, process_environment());
  if (o.elastic() && !o.slurm_note.empty()) {
    throw UsageError("--nnodes " + r.nnodes + ": an elastic job cannot run as a Slurm step, whose node count is fixed; "
                     "run it with a fixed --nnodes under srun, or start tandemrun on each node yourself");
  }
  if (o.nnodes < 1) throw UsageError("--nnodes: must be >= 1, not " + std::to_string(o.nnodes));
  if (static_cast<int64_t>(o.nnodes) * o.nproc_per_node > INT32_MAX) {
    throw UsageError("--nnodes " + std::to_string(o.nnodes) + " x --nproc-per-node " +
                     std::to_string(o.nproc_per_node) + ": more than " + std::to_string(INT32_MAX) + " ranks");
  }
  if (!o.elastic() && (o.node_rank < 0 || o.node_rank >= o.nnodes)) {
    throw UsageError("--node-rank: " + std::to_string(o.node_rank) + " is not in 0.." +
                     std::to_string(o.nnodes - 1) + " (--nnodes " + std::to_string(o.nnodes) + ")");
  }
  if (o.master_addr.empty()) throw UsageError("--master-addr: must not be empty");
  if (o.master_port < 0 || o.master_port > 65535) {
    throw UsageError("--master-port: " + std::to_string(o.master_port) + " is not in 0..65535");
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    throw UsageError("--master-port 0 works only with --nnodes 1: the other nodes could not learn the port "
                     "node 0 picks; give every node the same fixed --master-port");
  }
  if (o.max_restarts < 0) throw UsageError("--max-restarts: must be >= 0");
  o.grace = seconds_flag("--grace-s", r.grace_s, true);
  o.rdzv_timeout = seconds_flag("--rdzv-timeout-s", r.rdzv_timeout_s, false);
  o.rdzv_last_call = seconds_flag("--rdzv-last-call-s", r.rdzv_last_call_s, true);
  o.node_cooldown = seconds_flag("--node-cooldown-s", r.node_cooldown_s, true);
  o.recovery = r.recovery == "checkpoint" ? LaunchOptions::Recovery::checkpoint : LaunchOptions::Recovery::memory;
  if (app.count("--elastic-recovery") && !o.elastic())
    throw UsageError("--elastic-recovery: only for an elastic job (--nnodes MIN:MAX); a fixed job's restarts resume "
                     "from checkpoints");
  o.hang_timeout = seconds_flag("--hang-timeout-s", r.hang_timeout_s, true);
  if (!r.rank_filter.empty() || app.count("--rank-filter")) {
    o.rank_filter = parse_rank_list(r.rank_filter, o.world_size());
  }
  if (app.count("--job-secret-file") && o.job_secret_file.empty()) {
    throw UsageError("--job-secret-file: must not be empty");
  }
  o.job_secret_file_source = "--job-secret-file " + o.job_secret_file;
  if (const char* pass = std::getenv("TANDEM_PASS_JOB_SECRET"); pass && *pass) {
    const std::string_view v(pass);
    if (v != "0" && v != "1") throw UsageError("TANDEM_PASS_JOB_SECRET='" + std::string(v) + "': must be 1 or 0");
    o.pass_job_secret = o.pass_job_secret || v == "1";
  }
  if (const char* file = std::getenv("TANDEM_JOB_SECRET_FILE"); o.job_secret_file.empty() && file && *file) {
    o.job_secret_file = file;
    o.job_secret_file_source = std::string("TANDEM_JOB_SECRET_FILE=") + file;
  }
  if (app.count("--job-id") && o.job_id.empty()) throw UsageError("--job-id: must not be empty");
  if (o.job_id.empty()) {
    // Every node passes the same --master-port, so every node derives the same id. With
    // port 0 there is one node only, and the pid keeps concurrent local jobs apart.
    // With --rdzv-endpoint the store's port plays that part (tandem-store's default id too).
    o.job_id = o.external_store() ? "tandem-" + std::to_string(o.store_port)
               : o.master_port != 0 ? "tandem-" + std::to_string(o.master_port)
                                  : "tandem-local-" + std::to_string(getpid());
  }
  return o;
}

}  // namespace tandem::launcher
