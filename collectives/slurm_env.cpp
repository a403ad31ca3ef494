// srun's variables into LaunchEnv, every count checked against the others (slurm_env.h).
#include "collectives/slurm_env.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <numeric>

#include "collectives/slurm_hostlist.h"

namespace tandem::slurm {
namespace {

constexpr int kMaxCount = 1 << 20;

std::optional<std::string> get(const EnvLookup& lookup, const std::string& name) {
  auto v = lookup(name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

template <typename T>
T parse_number(const std::string& name, const std::string& value, T lo, T hi) {
  T v{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < lo || v > hi) {
    throw SlurmEnvError("environment variable " + name + "='" + value + "' is not an integer in [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

int require_int(const EnvLookup& lookup, const std::string& name, int lo, int hi) {
  auto v = get(lookup, name);
  if (!v) throw SlurmEnvError("environment variable " + name + " is not set (SLURM_PROCID is: srun sets both)");
  return parse_number<int>(name, *v, lo, hi);
}

std::optional<int> optional_int(const EnvLookup& lookup, const std::string& name, int lo, int hi) {
  auto v = get(lookup, name);
  if (!v) return std::nullopt;
  return parse_number<int>(name, *v, lo, hi);
}

std::string var_is(const std::string& name, long long value) { return name + "=" + std::to_string(value); }

}  // namespace

std::vector<int> slurm_ports(uint64_t job_id, uint64_t step_id) {
  const uint64_t h = (job_id % kPortSpan) * 7919 + step_id % kPortSpan;
  std::vector<int> ports;
  for (int k = 0; k < kPortCandidates; ++k) ports.push_back(kPortBase + static_cast<int>((h + k) % kPortSpan));
  return ports;
}

std::vector<int> parse_tasks_per_node(const std::string& var, std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return SlurmEnvError("environment variable " + var + "='" + std::string(text.substr(0, 200)) + "': " + why +
                         " (expected Slurm's form, e.g. 2(x3),1)");
  };
  std::vector<int> counts;
  size_t i = 0;
  if (text.empty()) throw bad("empty");
  for (;;) {
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start || i - start > 7) throw bad("a count was expected at offset " + std::to_string(start));
    const int n = parse_number<int>(var, std::string(text.substr(start, i - start)), 1, kMaxCount);
    int repeat = 1;
    if (i < text.size() && text[i] == '(') {
      if (text.substr(i, 2) != "(x") throw bad("'(x' was expected at offset " + std::to_string(i));
      i += 2;
      const size_t r = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
      if (i == r || i - r > 7 || i >= text.size() || text[i] != ')')
        throw bad("a repeat count and ')' were expected at offset " + std::to_string(r));
      repeat = parse_number<int>(var, std::string(text.substr(r, i - r)), 1, kMaxCount);
      ++i;
    }
    if (counts.size() + static_cast<size_t>(repeat) > static_cast<size_t>(kMaxCount)) throw bad("too many nodes");
    counts.insert(counts.end(), repeat, n);
    if (i == text.size()) return counts;
    if (text[i] != ',') throw bad(std::string("unexpected '") + text[i] + "' at offset " + std::to_string(i));
    ++i;
  }
}

bool under_srun(const EnvLookup& lookup) { return get(lookup, "SLURM_PROCID").has_value(); }

void read_srun_env(const EnvLookup& lookup, LaunchEnv& env) {
  env.under_slurm = true;
  // srun sets SLURM_NTASKS for its tasks to the step's count; SLURM_STEP_NUM_TASKS says the
  // same where slurmstepd sets it.
  const int ntasks = require_int(lookup, "SLURM_NTASKS", 1, kMaxCount);
  if (auto step = optional_int(lookup, "SLURM_STEP_NUM_TASKS", 1, kMaxCount); step && *step != ntasks) {
    throw SlurmEnvError("environment variables " + var_is("SLURM_NTASKS", ntasks) + " and " +
                        var_is("SLURM_STEP_NUM_TASKS", *step) + " disagree");
  }
  const int procid = require_int(lookup, "SLURM_PROCID", 0, kMaxCount);
  if (procid >= ntasks) {
    throw SlurmEnvError("environment variable " + var_is("SLURM_PROCID", procid) + " is not below " +
                        var_is("SLURM_NTASKS", ntasks));
  }
  const int localid = require_int(lookup, "SLURM_LOCALID", 0, kMaxCount);
  const int nodeid = require_int(lookup, "SLURM_NODEID", 0, kMaxCount);
  // The step's layout: SLURM_STEP_TASKS_PER_NODE (the step's own; SLURM_TASKS_PER_NODE
  // is the job's), else the --ntasks-per-node request SLURM_NTASKS_PER_NODE.
  const auto per_node_text = get(lookup, "SLURM_STEP_TASKS_PER_NODE");
  const auto ntasks_per_node = optional_int(lookup, "SLURM_NTASKS_PER_NODE", 1, kMaxCount);
  auto nnodes = optional_int(lookup, "SLURM_STEP_NUM_NODES", 1, kMaxCount);
  std::string nnodes_var = "SLURM_STEP_NUM_NODES";
  if (!nnodes) {
    nnodes = optional_int(lookup, "SLURM_NNODES", 1, kMaxCount);
    nnodes_var = "SLURM_NNODES";
  }
  // One task where several were meant (Open MPI issue 13523): each task would train alone.
  if (ntasks == 1) {
    const auto singleton = [&](const std::string& what) {
      return SlurmEnvError("environment variable SLURM_NTASKS=1, but " + what +
                           ": every task would train alone. Start the step with srun --ntasks-per-node=N "
                           "(or -n N); for one task on purpose, srun -N1 -n1 --ntasks-per-node=1");
    };
    if (ntasks_per_node && *ntasks_per_node > 1) throw singleton(var_is("SLURM_NTASKS_PER_NODE", *ntasks_per_node) + " asks for more per node");
    if (nnodes && *nnodes > 1) throw singleton(var_is(nnodes_var, *nnodes) + " nodes run this step");
  }
  if (per_node_text) {
    const std::vector<int> per_node = parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", *per_node_text);
    const long long sum = std::accumulate(per_node.begin(), per_node.end(), 0LL);
    if (sum != ntasks) {
      throw SlurmEnvError("environment variable SLURM_STEP_TASKS_PER_NODE='" + *per_node_text + "' sums to " +
                          std::to_string(sum) + " tasks, not " + var_is("SLURM_NTASKS", ntasks));
    }
    if (nnodes && static_cast<size_t>(*nnodes) != per_node.size()) {
      throw SlurmEnvError("environment variable SLURM_STEP_TASKS_PER_NODE='" + *per_node_text + "' lists " +
                          std::to_string(per_node.size()) + " nodes, not " + var_is(nnodes_var, *nnodes));
    }
    if (nodeid >= static_cast<int>(per_node.size())) {
      throw SlurmEnvError("environment variable " + var_is("SLURM_NODEID", nodeid) +
                          " is past the step's nodes (SLURM_STEP_TASKS_PER_NODE='" + *per_node_text + "')");
    }
    env.local_world_size = per_node[nodeid];
    env.node_count = static_cast<int>(per_node.size());
    if (localid >= env.local_world_size) {
      throw SlurmEnvError("environment variable " + var_is("SLURM_LOCALID", localid) + " is not below the " +
                          std::to_string(env.local_world_size) + " tasks of node " + std::to_string(nodeid) +
                          " (SLURM_STEP_TASKS_PER_NODE='" + *per_node_text + "')");
    }
  } else if (ntasks_per_node) {
    if (localid >= *ntasks_per_node) {
      throw SlurmEnvError("environment variable " + var_is("SLURM_LOCALID", localid) + " is not below " +
                          var_is("SLURM_NTASKS_PER_NODE", *ntasks_per_node));
    }
    if (nnodes && static_cast<long long>(*ntasks_per_node) * *nnodes < ntasks) {
      throw SlurmEnvError("environment variables " + var_is("SLURM_NTASKS", ntasks) + ", " +
                          var_is("SLURM_NTASKS_PER_NODE", *ntasks_per_node) + " and " + var_is(nnodes_var, *nnodes) +
                          " disagree: the nodes hold fewer tasks");
    }
    // The last node may hold fewer (srun -n 5 --ntasks-per-node 4: 4 and 1).
    env.local_world_size = std::min(*ntasks_per_node, ntasks - nodeid * *ntasks_per_node);
    if (env.local_world_size <= localid) {
      throw SlurmEnvError("environment variables " + var_is("SLURM_NODEID", nodeid) + " and " +
                          var_is("SLURM_LOCALID", localid) + " are past " + var_is("SLURM_NTASKS", ntasks) + " at " +
                          var_is("SLURM_NTASKS_PER_NODE", *ntasks_per_node));
    }
    if (nnodes) env.node_count = *nnodes;
  } else if (nnodes) {
    env.node_count = *nnodes;
    if (*nnodes == 1) env.local_world_size = ntasks;
  }
  if (env.node_count > 0 && nodeid >= env.node_count) {
    throw SlurmEnvError("environment variable " + var_is("SLURM_NODEID", nodeid) + " is not below " +
                        var_is(nnodes_var, env.node_count));
  }
  env.rank = procid;
  env.world_size = ntasks;
  env.local_rank = localid;
  env.node_rank = nodeid;
}

void read_srun_store(const EnvLookup& lookup, LaunchEnv& env) {
  const auto nodelist = get(lookup, "SLURM_STEP_NODELIST");
  if (!nodelist) {
    throw SlurmEnvError("environment variable SLURM_STEP_NODELIST is not set (srun sets it; rank 0 hosts the store "
                        "on its first host); or name the store with MASTER_ADDR and MASTER_PORT");
  }
  try {
    env.master_addr = first_host(*nodelist);
  } catch (const std::invalid_argument& e) {
    throw SlurmEnvError(std::string("environment variable SLURM_STEP_NODELIST: ") + e.what());
  }
  const auto job = get(lookup, "SLURM_JOB_ID");
  if (!job) throw SlurmEnvError("environment variable SLURM_JOB_ID is not set (srun sets it; the store's port is derived from it)");
  const auto step = get(lookup, "SLURM_STEP_ID");
  if (!step) throw SlurmEnvError("environment variable SLURM_STEP_ID is not set (srun sets it; the store's port is derived from it)");
  const auto job_id = parse_number<uint64_t>("SLURM_JOB_ID", *job, 0, UINT64_MAX);
  const auto step_id = parse_number<uint64_t>("SLURM_STEP_ID", *step, 0, UINT64_MAX);
  env.port_candidates = slurm_ports(job_id, step_id);
  env.master_port = env.port_candidates.front();
  env.job_id = "slurm-" + *job + "." + *step;
}

int gpu_index(const EnvLookup& lookup, const LaunchEnv& env) {
  const int tasks = env.local_world_size > 0 ? env.local_world_size : 1;
  const auto on_node = optional_int(lookup, "SLURM_GPUS_ON_NODE", 0, kMaxCount);
  if (on_node && *on_node < tasks) {
    throw SlurmEnvError("environment variable " + var_is("SLURM_GPUS_ON_NODE", *on_node) + " gives fewer GPUs than the " +
                        std::to_string(tasks) + " tasks on this node (--device cuda needs one per task: "
                        "srun --gpus-per-node=" + std::to_string(tasks) + " or --gpus-per-task=1)");
  }
  const auto visible = get(lookup, "CUDA_VISIBLE_DEVICES");
  if (!visible) return env.local_rank;
  const int count = static_cast<int>(std::count(visible->begin(), visible->end(), ',')) + 1;
  if (count >= tasks) return env.local_rank;
  if (count == 1 && on_node) return 0;  // srun bound one GPU to each task
  throw SlurmEnvError("environment variable CUDA_VISIBLE_DEVICES='" + *visible + "' gives " + std::to_string(count) +
                      (count == 1 ? " GPU" : " GPUs") + " to the " + std::to_string(tasks) +
                      " tasks on this node (--device cuda needs one per task)");
}

}  // namespace tandem::slurm
