// init_process_group: environment parsing, backend choice, store start-up and the
// rendezvous that names missing ranks (see init.h).
#include "collectives/init.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include <spdlog/spdlog.h>

#include "collectives/backends.h"
#include "collectives/slurm_env.h"
#include "collectives/store_auth.h"
#include "collectives/untrusted_text.h"

namespace tandem {

const char* backend_str(Backend backend) {
  switch (backend) {
    case Backend::automatic: return "auto";
    case Backend::mpi: return "mpi";
    case Backend::gloo: return "gloo";
    case Backend::nccl: return "nccl";
    case Backend::shm: return "shm";
    case Backend::hier: return "hier";
  }
  return "?";
}

Backend parse_backend(std::string_view name) {
  for (Backend b : {Backend::automatic, Backend::mpi, Backend::gloo, Backend::nccl, Backend::shm, Backend::hier}) {
    if (name == backend_str(b)) return b;
  }
  throw std::invalid_argument("unknown backend '" + std::string(name) + "' (accepted: auto, mpi, gloo, nccl, shm, hier)");
}

bool backend_built(Backend backend) {
  switch (backend) {
    case Backend::automatic: return true;
    case Backend::mpi: return kMpiBuilt;
    case Backend::gloo: return kGlooBuilt;
    case Backend::nccl: return kNcclBuilt;
    case Backend::shm: return kShmBuilt;
    case Backend::hier: return kShmBuilt;  // gloo is needed, and checked, once it spans nodes
  }
  return false;
}

namespace {

int parse_int(const std::string& name, const std::string& value, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < lo || v > hi) {
    throw std::invalid_argument("environment variable " + name + "='" + value +
                                "' is not an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  }
  return v;
}

constexpr int kMaxWorld = 1 << 20;

// The memfd's name as /proc/self/fd shows it (launcher/job_secret.cpp makes it).
constexpr std::string_view kSecretMemfdLink = "/memfd:tandem-job-secret";

// The secret in descriptor `fd`, read once per process: the descriptor is closed then, so
// nothing this process starts inherits it, and later reads (another process group in the
// same process) get the copy kept here. Only tandemrun's memfd is read: a child that
// inherited the variable from a worker, whose descriptor of that number is closed or is
// some other file, is told so instead of reading that file as a secret.
std::string read_secret_descriptor(int fd, const std::string& what) {
  static std::mutex mutex;
  static std::map<int, std::string> read;  // descriptor number -> its secret, once read
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = read.find(fd); it != read.end()) return it->second;
  const std::string why =
      ": the secret reaches only the programs tandemrun starts, not their children (give this process "
      "TANDEM_JOB_SECRET_FILE)";
  char link[256] = {};
  const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1);
  if (n < 0 && errno == ENOENT) throw std::invalid_argument(what + ": descriptor " + std::to_string(fd) + " is not open" + why);
  if (n < 0) throw std::invalid_argument(what + ": cannot read the job secret: " + std::strerror(errno));
  if (std::string_view(link, static_cast<size_t>(n)).rfind(kSecretMemfdLink, 0) != 0) {
    throw std::invalid_argument(what + ": descriptor " + std::to_string(fd) + " is " +
                                quote_untrusted(std::string_view(link, static_cast<size_t>(n))) +
                                ", not tandemrun's job-secret memfd" + why);
  }
  std::string secret = store_auth::read_secret_fd(fd, what);
  close(fd);
  read.emplace(fd, secret);
  return secret;
}

// The descriptor tandemrun passes wins over a file the user names.
std::string read_job_secret(const EnvLookup& lookup) {
  if (auto fd_text = lookup("TANDEM_JOB_SECRET_FD"); fd_text && !fd_text->empty()) {
    const int fd = parse_int("TANDEM_JOB_SECRET_FD", *fd_text, 0, 1 << 20);
    return read_secret_descriptor(fd, "environment variable TANDEM_JOB_SECRET_FD=" + *fd_text);
  }
  if (auto file = lookup("TANDEM_JOB_SECRET_FILE"); file && !file->empty()) {
    return store_auth::read_secret_file(*file, "environment variable TANDEM_JOB_SECRET_FILE=" + *file);
  }
  return {};
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

LaunchEnv read_launch_env(const EnvLookup& lookup_in) {
  const EnvLookup lookup = lookup_in ? lookup_in : process_environment();
  const auto require = [&](const std::string& name, const std::string& because) {
    auto v = lookup(name);
    if (!v || v->empty()) throw std::invalid_argument("environment variable " + name + " is not set (" + because + ")");
    return *v;
  };
  LaunchEnv env;
  const auto ompi_rank = lookup("OMPI_COMM_WORLD_RANK");
  env.under_mpirun = ompi_rank.has_value();
  if (auto rank = lookup("RANK"); rank && !rank->empty()) {
    env.world_size = parse_int("WORLD_SIZE", require("WORLD_SIZE", "RANK is set"), 1, kMaxWorld);
    env.rank = parse_int("RANK", *rank, 0, env.world_size - 1);
    const auto local = lookup("LOCAL_RANK");
    env.local_rank = local ? parse_int("LOCAL_RANK", *local, 0, kMaxWorld) : env.rank;
    if (auto local_world = lookup("LOCAL_WORLD_SIZE"); local_world && !local_world->empty()) {
      env.local_world_size = parse_int("LOCAL_WORLD_SIZE", *local_world, 1, kMaxWorld);
    }
    if (auto node = lookup("NODE_RANK"); node && !node->empty()) {
      env.node_rank = parse_int("NODE_RANK", *node, 0, kMaxWorld);
    }
  } else if (env.under_mpirun) {
    env.world_size = parse_int("OMPI_COMM_WORLD_SIZE", require("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set"), 1, kMaxWorld);
    env.rank = parse_int("OMPI_COMM_WORLD_RANK", *ompi_rank, 0, env.world_size - 1);
    const auto local = lookup("OMPI_COMM_WORLD_LOCAL_RANK");
    env.local_rank = local ? parse_int("OMPI_COMM_WORLD_LOCAL_RANK", *local, 0, kMaxWorld) : env.rank;
  } else if (slurm::under_srun(lookup)) {
    slurm::read_srun_env(lookup, env);
  } else {
    const auto job = lookup("SLURM_JOB_ID");
    throw std::invalid_argument(
        "environment variable RANK is not set: start the processes with tandemrun (which sets RANK, "
        "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), with mpirun or with srun" +
        (job && !job->empty() ? " (SLURM_JOB_ID=" + *job + " is set but SLURM_PROCID is not: inside a Slurm "
                                "allocation, start each task with srun)"
                              : std::string()));
  }
  if (env.under_mpirun) {
    const int mpi_rank = parse_int("OMPI_COMM_WORLD_RANK", *ompi_rank, 0, kMaxWorld);
    if (mpi_rank != env.rank) {
      throw std::invalid_argument("environment variables RANK=" + std::to_string(env.rank) +
                                  " and OMPI_COMM_WORLD_RANK=" + std::to_string(mpi_rank) + " disagree");
    }
  }
  // Tandem's store: TANDEM_STORE_ADDR/PORT where a launcher leaves MASTER_PORT to the
  // job's own processes (tandemrun), else MASTER_ADDR/PORT (mpirun -x, a hand-set one).
  const auto set = [&](const char* name) { auto v = lookup(name); return v && !v->empty(); };
  const bool own = set("TANDEM_STORE_ADDR") || set("TANDEM_STORE_PORT");
  const std::string addr_var = own ? "TANDEM_STORE_ADDR" : "MASTER_ADDR";
  const std::string port_var = own ? "TANDEM_STORE_PORT" : "MASTER_PORT";
  if (!own && lookup("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True")) {
    throw std::invalid_argument(
        "environment variable TORCHELASTIC_USE_AGENT_STORE=True: torchrun started this process, and its agent "
        "serves a PyTorch (c10d) store at MASTER_ADDR:MASTER_PORT, which Tandem's collectives cannot speak to; "
        "start Tandem programs with tandemrun or mpirun, or give them a store of their own with "
        "TANDEM_STORE_ADDR and TANDEM_STORE_PORT");
  }
  const auto addr = lookup(addr_var);
  const auto port = lookup(port_var);
  if (addr && !addr->empty()) {
    env.master_addr = *addr;
    env.master_port = parse_int(port_var, require(port_var, addr_var + " is set"), 1, 65535);
  } else if (port && !port->empty()) {
    throw std::invalid_argument("environment variable " + addr_var + " is not set (" + port_var + " is)");
  } else if (env.under_slurm) {
    slurm::read_srun_store(lookup, env);
  } else if (!env.under_mpirun) {
    require(addr_var, "the host of the rendezvous store, e.g. 127.0.0.1");
  }
  if (auto job = lookup("TANDEM_JOB_ID"); job && !job->empty()) env.job_id = *job;
  if (auto hosted = lookup("TANDEM_STORE_HOSTED"); hosted && !hosted->empty()) {
    env.store_hosted = parse_int("TANDEM_STORE_HOSTED", *hosted, 0, 1) == 1;
  }
  if (auto restarts = lookup("TANDEM_RESTART_COUNT"); restarts && !restarts->empty()) {
    env.restart_count = parse_int("TANDEM_RESTART_COUNT", *restarts, 0, 1 << 30);
  }
  env.job_secret = read_job_secret(lookup);
  if (auto checks = lookup("TANDEM_COLLECTIVE_CHECKS"); checks && !checks->empty()) {
    if (*checks != "0" && *checks != "1") {
      throw std::invalid_argument("environment variable TANDEM_COLLECTIVE_CHECKS='" + *checks +
                                  "' must be 1 (check that every rank issues the same collective, the "
                                  "default) or 0 (do not)");
    }
    env.collective_checks = *checks == "1";
  }
  return env;
}

namespace {

// Every rank on this node: the launcher said so (LOCAL_WORLD_SIZE == WORLD_SIZE).
bool all_ranks_local(const LaunchEnv& env) { return env.local_world_size == env.world_size; }

// Under srun with several nodes: shm within each node, gloo between them.
bool slurm_across_nodes(const LaunchEnv& env) { return env.under_slurm && env.node_count > 1 && kGlooBuilt; }

std::string slurm_layout(const LaunchEnv& env) {
  std::string s = " under Slurm";
  if (env.node_count > 0) s += ", " + std::to_string(env.node_count) + (env.node_count == 1 ? " node" : " nodes");
  if (env.local_world_size > 0) s += ", " + std::to_string(env.local_world_size) + " on this node";
  return s;
}

}  // namespace

std::string backend_reason(Backend requested, DeviceKind device, const LaunchEnv& env) {
  if (requested != Backend::automatic) return "requested";
  const std::string n = std::to_string(env.world_size) + (env.world_size == 1 ? " rank" : " ranks");
  if (env.under_slurm && !env.under_mpirun) {
    const std::string where = "auto: " + n + slurm_layout(env);
    if (device == DeviceKind::cuda) return where + ", CUDA tensors";
    if (all_ranks_local(env)) return where + ", all on this node, CPU tensors";
    if (slurm_across_nodes(env)) return where + ", CPU tensors: shm within each node, gloo between";
    return where + ", CPU tensors";
  }
  if (device == DeviceKind::cuda) return "auto: CUDA tensors";
  if (env.under_mpirun && kMpiBuilt) return "auto: " + n + " under mpirun, CPU tensors";
  if (!env.under_mpirun && all_ranks_local(env)) return "auto: " + n + ", all on this node, CPU tensors";
  return "auto: " + n + ", CPU tensors, " +
         (env.local_world_size < 0 ? std::string("LOCAL_WORLD_SIZE not set")
                                   : "LOCAL_WORLD_SIZE " + std::to_string(env.local_world_size) + " of " +
                                         std::to_string(env.world_size) + " on this node");
}

Backend resolve_backend(Backend requested, DeviceKind device, const LaunchEnv& env) {
  Backend b = requested;
  if (b == Backend::automatic) {
    if (device == DeviceKind::cuda) {
      b = Backend::nccl;
    } else if (env.under_mpirun && kMpiBuilt) {
      b = Backend::mpi;
    } else if (!env.under_mpirun && all_ranks_local(env)) {
      b = Backend::shm;
    } else if (!env.under_mpirun && slurm_across_nodes(env)) {
      b = Backend::hier;
    } else {
      b = Backend::gloo;
    }
  }
  if (!backend_built(b)) {
    throw std::invalid_argument(std::string("the ") + backend_str(b) +
                                " backend is not part of this build (see the TANDEM_WITH_* CMake options)");
  }
  if (b == Backend::nccl && device != DeviceKind::cuda) {
    throw std::invalid_argument("the nccl backend needs --device cuda");
  }
  if (b != Backend::nccl && device == DeviceKind::cuda) {
    throw std::invalid_argument(std::string("the ") + backend_str(b) + " backend cannot reduce CUDA buffers; use nccl");
  }
  // Under srun --mpi=pmix, Open MPI learns its ranks from Slurm's PMIx server inside
  // MPI_Init; the mpi group checks them against SLURM_PROCID and SLURM_NTASKS there.
  if (b == Backend::mpi && !env.under_mpirun && !env.under_slurm) {
    throw std::invalid_argument("the mpi backend needs processes started by mpirun or by srun --mpi=pmix "
                                "(environment variables OMPI_COMM_WORLD_RANK and SLURM_PROCID are not set)");
  }
  if (b != Backend::mpi && env.master_addr.empty()) {
    throw std::invalid_argument(std::string("the ") + backend_str(b) +
                                " backend rendezvous through a store: environment variable "
                                "MASTER_ADDR is not set");
  }
  return b;
}

void rendezvous(Store& store, int rank, int world_size, std::chrono::milliseconds timeout) {
  // compare_set, not set: a second process claiming the same rank is caught here
  // instead of hanging the first collective.
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const std::string me = std::string(host) + ":" + std::to_string(getpid());
  const std::string key = "arrived/" + std::to_string(rank);
  const std::string holder = store.compare_set(key, "", me);
  if (holder != me) {
    throw CollectiveError("rendezvous: rank " + std::to_string(rank) + " is already taken by process " +
                          holder + " (two processes were given RANK=" + std::to_string(rank) + ")");
  }
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("arrived/" + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const StoreTimeout& e) {
    std::vector<bool> missing(world_size, false);
    for (const auto& k : e.missing_keys) {
      int r = -1;
      if (k.rfind("arrived/", 0) == 0) std::from_chars(k.data() + 8, k.data() + k.size(), r);
      if (r >= 0 && r < world_size) missing[r] = true;
    }
    std::string absent, present;
    int n_absent = 0;
    for (int r = 0; r < world_size; ++r) {
      std::string& list = missing[r] ? absent : present;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
      n_absent += missing[r];
    }
    throw CollectiveTimeout("rendezvous timed out after " + std::to_string(timeout.count()) + " ms on rank " +
                            std::to_string(rank) + ": " + (n_absent == 1 ? "rank " : "ranks ") + absent +
                            " of world size " + std::to_string(world_size) + (n_absent == 1 ? " has" : " have") +
                            " not arrived (arrived: " + present + "; " + store.describe() + ")");
  }
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  return init_process_group(options, read_launch_env());
}

namespace {

// Rank 0's store, on the first of `ports` that is free (one port: that one, or the error).
std::shared_ptr<StoreServer> host_store(const LaunchEnv& env, const std::vector<int>& ports) {
  std::shared_ptr<StoreServer> server;
  for (size_t k = 0; k < ports.size() && !server; ++k) {
    try {
      server = std::make_shared<StoreServer>(StoreServerOptions{"0.0.0.0", ports[k], env.job_id, env.job_secret});
    } catch (const StoreError& e) {
      if (k + 1 == ports.size()) {
        throw CollectiveError("rank 0 cannot host the store: " + std::string(e.what()) +
                              (ports.size() > 1 ? " (and the " + std::to_string(ports.size() - 1) +
                                                      " candidate ports before it; name a free one with MASTER_PORT)"
                                                : std::string()));
      }
      spdlog::info("store: port {} is taken ({}); trying {}", ports[k], e.what(), ports[k + 1]);
    }
  }
  if (env.job_secret.empty()) {
    spdlog::warn("rank 0 hosts the store on port {} without a job secret: any process that can reach it and "
                 "knows the job id can read and rewrite the rendezvous (set TANDEM_JOB_SECRET_FILE; "
                 "docs/security.md)",
                 server->port());
  }
  return server;
}

// Connects to the store on one of `ports`. With several (srun's candidates), each is tried
// in turn for a short while until `timeout`; a store that refuses this job (another job's,
// which took a candidate port first) is skipped for good.
std::shared_ptr<Store> connect_store(const LaunchEnv& env, const std::vector<int>& ports,
                                     std::chrono::milliseconds timeout) {
  TcpStoreOptions so;
  so.host = env.master_addr;
  so.job_id = env.job_id;
  so.secret = env.job_secret;
  if (ports.size() == 1) {
    so.port = ports.front();
    so.connect_timeout = timeout;
    return std::make_shared<TcpStore>(so);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> refusals(ports.size());
  for (;;) {
    bool any = false;
    for (size_t k = 0; k < ports.size(); ++k) {
      if (!refusals[k].empty()) continue;
      any = true;
      so.port = ports[k];
      so.connect_timeout = std::chrono::milliseconds(200);  // a turn, not a deadline: the loop has that
      try {
        return std::make_shared<TcpStore>(so);
      } catch (const StoreUnreachable&) {
        // not listening yet: rank 0 may still be starting, or took a later candidate
      } catch (const StoreError& e) {
        refusals[k] = e.what();
      }
    }
    std::string refused;
    for (size_t k = 0; k < ports.size(); ++k) {
      if (!refusals[k].empty()) refused += "; port " + std::to_string(ports[k]) + ": " + refusals[k];
    }
    if (!any || std::chrono::steady_clock::now() >= deadline) {
      std::string list;
      for (int p : ports) list += (list.empty() ? "" : ", ") + std::to_string(p);
      throw StoreUnreachable("no store of job " + env.job_id + " on " + env.master_addr + " at ports " + list +
                             " within " + std::to_string(timeout.count()) + " ms" + refused);
    }
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options, const LaunchEnv& env) {
  const Backend backend = resolve_backend(options.backend, options.device, env);
  BackendArgs args;
  args.rank = env.rank;
  args.size = env.world_size;
  args.local_rank = env.local_rank;
  args.node_rank = env.node_rank;
  args.device = options.device == DeviceKind::cuda ? Device::cuda(env.local_rank) : Device::cpu();
  args.timeout = options.timeout;
  args.master_addr = env.master_addr;
  args.job_id = env.job_id;
  args.group_name = options.group_name;
  args.check_ops = options.check_ops && env.collective_checks;
  // The mpi backend under srun --mpi=pmix makes its own store over MPI, with a secret of
  // its own (bootstrap_store), rather than one at the port derived from Slurm's job id.
  const bool mpi_makes_store = backend == Backend::mpi && env.under_slurm && !env.port_candidates.empty();
  if (!env.master_addr.empty() && !mpi_makes_store) {
    const std::vector<int> ports = env.port_candidates.empty() ? std::vector<int>{env.master_port} : env.port_candidates;
    if (env.rank == 0 && !env.store_hosted) args.server = host_store(env, ports);
    std::shared_ptr<Store> base;
    try {
      base = args.server ? connect_store(env, {args.server->port()}, options.rendezvous_timeout)
                         : connect_store(env, ports, options.rendezvous_timeout);
    } catch (const StoreError& e) {
      const std::string host = env.store_hosted ? "the launcher" : "rank 0";
      throw CollectiveError("rendezvous failed on rank " + std::to_string(env.rank) + ": " + e.what() +
                            " (the store is hosted by " + host + ")");
    }
    args.store = std::make_shared<PrefixStore>(
        "tandem/" + std::to_string(env.restart_count) + "/" + options.group_name + "/", base);
    rendezvous(*args.store, env.rank, env.world_size, options.rendezvous_timeout);
  }
  if (env.rank == 0) {
    spdlog::info("collectives: backend {} ({})", backend_str(backend), backend_reason(options.backend, options.device, env));
  }
  switch (backend) {
    case Backend::shm: return make_shm_group(args);
    case Backend::hier: return make_hier_group(args);
    case Backend::mpi: return make_mpi_group(args);
    case Backend::gloo: return make_gloo_group(args);
    case Backend::nccl: return make_nccl_group(args);
    case Backend::automatic: break;
  }
  throw std::logic_error("init_process_group: unresolved backend");
}

}  // namespace tandem
