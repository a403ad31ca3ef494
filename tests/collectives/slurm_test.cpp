// Direct launch under srun: the host-list parser against scontrol's answers
// (tests/data/slurm_hostlists.txt, written by scripts/make-slurm-hostlists, and the live
// scontrol where it is installed), the compressed task counts, and read_launch_env with
// srun's variables (a fake environment), including every inconsistency it must refuse.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "collectives/init.h"
#include "collectives/slurm_env.h"
#include "collectives/slurm_hostlist.h"
#include "collectives/store.h"
#include "tests/collectives/fake_env.h"

namespace tandem {
namespace {

using slurm::expand_hostlist;

struct OracleCase {
  std::string expr;
  std::vector<std::string> hosts;  // empty: scontrol refuses it
};

std::vector<OracleCase> oracle_cases() {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/slurm_hostlists.txt");
  std::vector<OracleCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    OracleCase c{line.substr(0, tab), {}};
    if (line.substr(tab + 1) != "!") {
      std::istringstream hosts(line.substr(tab + 1));
      for (std::string h; hosts >> h;) c.hosts.push_back(h);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string joined(const std::vector<std::string>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : " ") + h;
  return s;
}

void expect_matches(const OracleCase& c) {
  if (c.hosts.empty()) {
    EXPECT_THROW(expand_hostlist(c.expr), std::invalid_argument) << c.expr;
    EXPECT_THROW(slurm::first_host(c.expr), std::invalid_argument) << c.expr;
    return;
  }
  try {
    EXPECT_EQ(joined(expand_hostlist(c.expr)), joined(c.hosts)) << c.expr;
    EXPECT_EQ(slurm::first_host(c.expr), c.hosts.front()) << c.expr;
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << c.expr << ": " << e.what();
  }
}

TEST(SlurmHostlist, MatchesScontrolsRecordedAnswers) {
  const auto cases = oracle_cases();
  ASSERT_GE(cases.size(), 30u) << "tests/data/slurm_hostlists.txt";
  for (const auto& c : cases) expect_matches(c);
}

// The same expressions, asked of the scontrol on this machine (it needs a configuration,
// not a controller: a minimal one is written next to the test's files).
TEST(SlurmHostlist, MatchesLiveScontrol) {
  if (std::system("command -v scontrol >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "scontrol is not installed (Debian's slurm-client): checked against the recorded answers only";
  }
  const auto dir = std::filesystem::temp_directory_path() / ("tandem-slurm-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "slurm.conf") << "ClusterName=oracle\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\n"
                                       "PartitionName=p Nodes=localhost\n";
  for (auto c : oracle_cases()) {
    const std::string cmd = "SLURM_CONF='" + (dir / "slurm.conf").string() + "' scontrol show hostnames '" + c.expr +
                            "' 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    std::array<char, 4096> buf;
    for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
    pclose(p);
    std::istringstream hosts(out);
    c.hosts.clear();
    for (std::string h; hosts >> h;) c.hosts.push_back(h);
    expect_matches(c);
  }
  std::filesystem::remove_all(dir);
}

std::string hostlist_error(const std::string& expr) {
  try {
    expand_hostlist(expr);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Where scontrol is lenient (it skips empty entries, reads "n[1-2" as "n]", "n[1-]" as
// "n1"), Tandem refuses: srun never writes these, so one is a mistake to report.
TEST(SlurmHostlist, BadInputNamesTheProblem) {
  EXPECT_NE(hostlist_error("n[1-2").find("unbalanced '['"), std::string::npos);
  EXPECT_NE(hostlist_error("n1-2]").find("unbalanced ']'"), std::string::npos);
  EXPECT_NE(hostlist_error("n[[1]]").find("nested '['"), std::string::npos);
  EXPECT_NE(hostlist_error("n[3-1]").find("a reversed range 3-1"), std::string::npos);
  EXPECT_NE(hostlist_error("n[1-]").find("a number was expected"), std::string::npos);
  EXPECT_NE(hostlist_error("n[]").find("an empty part inside brackets"), std::string::npos);
  EXPECT_NE(hostlist_error("n[1,,2]").find("an empty part inside brackets"), std::string::npos);
  EXPECT_NE(hostlist_error("a,,b").find("an empty entry at offset 2"), std::string::npos);
  EXPECT_NE(hostlist_error(",a").find("an empty entry"), std::string::npos);
  EXPECT_NE(hostlist_error("a,").find("an empty entry"), std::string::npos);
  EXPECT_NE(hostlist_error("").find("an empty host list"), std::string::npos);
  EXPECT_NE(hostlist_error("a b").find("character ' ' is not allowed"), std::string::npos);
  EXPECT_NE(hostlist_error("n[1234567890]").find("more than 9 digits"), std::string::npos);
  EXPECT_NE(hostlist_error("n[1-100000]").find("more than 65536 hosts"), std::string::npos);
  EXPECT_NE(hostlist_error("a[1-1000]b[1-1000]").find("more than 65536 hosts"), std::string::npos);
  EXPECT_NE(hostlist_error("a[1-60000],b[1-60000]").find("more than 65536 hosts"), std::string::npos);
  EXPECT_EQ(expand_hostlist("n[1-65536]").size(), slurm::kMaxHosts);
  // Beyond scontrol (22.05 refuses text after the last group): a suffix is kept.
  EXPECT_EQ(joined(expand_hostlist("x[1-2]-ib")), "x1-ib x2-ib");
  // The first host needs no expansion of the rest.
  EXPECT_EQ(slurm::first_host("gpu[007-999]x[3-9],b"), "gpu007x3");
}

TEST(SlurmTasksPerNode, CompressedForm) {
  EXPECT_EQ(slurm::parse_tasks_per_node("V", "4"), std::vector<int>({4}));
  EXPECT_EQ(slurm::parse_tasks_per_node("V", "2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(slurm::parse_tasks_per_node("V", "1,3(x2)"), std::vector<int>({1, 3, 3}));
  for (const char* bad : {"", "2(x", "2(x)", "2(3)", "x", "2,", ",2", "2(x3)1", "0", "2(x0)", "99999999"}) {
    try {
      slurm::parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const slurm::SlurmEnvError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos) << e.what();
    }
  }
}

// What srun sets for task `rank` of a step of `nodes` x `per_node` tasks (block layout).
std::map<std::string, std::string> srun_env(int rank, int nodes, int per_node) {
  const std::string per = nodes == 1 ? std::to_string(per_node)
                                     : std::to_string(per_node) + "(x" + std::to_string(nodes) + ")";
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", std::to_string(nodes * per_node)},
          {"SLURM_LOCALID", std::to_string(rank % per_node)},
          {"SLURM_NODEID", std::to_string(rank / per_node)},
          {"SLURM_NNODES", std::to_string(nodes)},
          {"SLURM_NTASKS_PER_NODE", std::to_string(per_node)},
          {"SLURM_STEP_TASKS_PER_NODE", per},
          {"SLURM_STEP_NUM_TASKS", std::to_string(nodes * per_node)},
          {"SLURM_STEP_NUM_NODES", std::to_string(nodes)},
          {"SLURM_STEP_NODELIST", "gpu-[07-08]"},
          {"SLURM_JOB_NODELIST", "gpu-[01-08]"},
          {"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "3"}};
}

std::map<std::string, std::string> with(std::map<std::string, std::string> vars,
                                        const std::map<std::string, std::string>& changes) {
  for (const auto& [k, v] : changes) {
    if (v == "<unset>") {
      vars.erase(k);
    } else {
      vars[k] = v;
    }
  }
  return vars;
}

std::string srun_error(const std::map<std::string, std::string>& vars) {
  try {
    read_launch_env(env_of(vars));
  } catch (const slurm::SlurmEnvError& e) {
    return e.what();
  } catch (const std::invalid_argument& e) {
    return std::string("(not a SlurmEnvError) ") + e.what();
  }
  return "";
}

TEST(Env, SrunVariables) {
  const LaunchEnv env = read_launch_env(env_of(srun_env(3, 2, 2)));
  EXPECT_TRUE(env.under_slurm);
  EXPECT_FALSE(env.under_mpirun);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.node_count, 2);
  EXPECT_EQ(env.master_addr, "gpu-07");  // the step's first node, not the job's
  EXPECT_EQ(env.job_id, "slurm-4242.3");
  EXPECT_EQ(env.port_candidates, slurm::slurm_ports(4242, 3));
  EXPECT_EQ(env.master_port, env.port_candidates.front());
  for (int p : env.port_candidates) {
    EXPECT_GE(p, slurm::kPortBase);
    EXPECT_LT(p, slurm::kPortBase + slurm::kPortSpan);
  }
  // Another step of the job, and the next job, start elsewhere.
  EXPECT_NE(slurm::slurm_ports(4242, 4).front(), env.master_port);
  EXPECT_NE(slurm::slurm_ports(4243, 3).front(), env.master_port);
  // The batch step's id (4294967294) and huge job ids stay in range.
  for (int p : slurm::slurm_ports(18446744073709551615ull, 4294967294ull)) EXPECT_LT(p, 30000);
  // Uneven nodes: 5 tasks as 2(x2),1; the last node holds one.
  const LaunchEnv last = read_launch_env(env_of(with(srun_env(4, 3, 2), {{"SLURM_NTASKS", "5"}, {"SLURM_STEP_NUM_TASKS", "5"},
                                                                          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                                                          {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"}})));
  EXPECT_EQ(last.local_world_size, 1);
  EXPECT_EQ(last.node_count, 3);
  // Without SLURM_STEP_TASKS_PER_NODE, --ntasks-per-node's count (the last node's share).
  const LaunchEnv request = read_launch_env(env_of(with(srun_env(4, 3, 2), {{"SLURM_NTASKS", "5"}, {"SLURM_STEP_NUM_TASKS", "5"},
                                                                             {"SLURM_STEP_TASKS_PER_NODE", "<unset>"},
                                                                             {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"}})));
  EXPECT_EQ(request.local_world_size, 1);
}

TEST(Env, ExplicitStoreAndOtherLaunchersWinOverSrun) {
  const LaunchEnv named = read_launch_env(env_of(with(srun_env(1, 1, 2), {{"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29555"}})));
  EXPECT_TRUE(named.under_slurm);
  EXPECT_EQ(named.rank, 1);
  EXPECT_EQ(named.master_addr, "10.0.0.5");
  EXPECT_EQ(named.master_port, 29555);
  EXPECT_TRUE(named.port_candidates.empty());
  const LaunchEnv own = read_launch_env(
      env_of(with(srun_env(1, 1, 2), {{"TANDEM_STORE_ADDR", "s"}, {"TANDEM_STORE_PORT", "7"}, {"TANDEM_JOB_ID", "mine"}})));
  EXPECT_EQ(own.master_addr, "s");
  EXPECT_EQ(own.master_port, 7);
  EXPECT_EQ(own.job_id, "mine");
  // mpirun inside an allocation: its variables, as before.
  const LaunchEnv mpi = read_launch_env(env_of(with(srun_env(0, 1, 2), {{"OMPI_COMM_WORLD_RANK", "2"},
                                                                         {"OMPI_COMM_WORLD_SIZE", "3"}})));
  EXPECT_TRUE(mpi.under_mpirun);
  EXPECT_FALSE(mpi.under_slurm);
  EXPECT_EQ(mpi.rank, 2);
  EXPECT_EQ(mpi.world_size, 3);
  // tandemrun inside an allocation: RANK and its store.
  const LaunchEnv tr = read_launch_env(env_of(with(srun_env(0, 1, 2), {{"RANK", "1"}, {"WORLD_SIZE", "4"},
                                                                        {"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}})));
  EXPECT_FALSE(tr.under_slurm);
  EXPECT_EQ(tr.world_size, 4);
}

TEST(Env, SrunInconsistenciesNameTheVariable) {
  const auto base = srun_env(1, 2, 2);
  const auto expect_error = [&](const std::map<std::string, std::string>& changes, const std::string& needle) {
    const std::string e = srun_error(with(base, changes));
    EXPECT_NE(e.find(needle), std::string::npos) << "got: " << e;
    EXPECT_EQ(e.find("(not a SlurmEnvError)"), std::string::npos) << e;
  };
  expect_error({{"SLURM_PROCID", "4"}}, "SLURM_PROCID=4 is not below SLURM_NTASKS=4");
  expect_error({{"SLURM_NTASKS", "x"}}, "SLURM_NTASKS='x' is not an integer");
  expect_error({{"SLURM_NTASKS", "<unset>"}}, "SLURM_NTASKS is not set");
  expect_error({{"SLURM_LOCALID", "<unset>"}}, "SLURM_LOCALID is not set");
  expect_error({{"SLURM_STEP_NUM_TASKS", "8"}}, "SLURM_NTASKS=4 and SLURM_STEP_NUM_TASKS=8 disagree");
  expect_error({{"SLURM_LOCALID", "2"}}, "SLURM_LOCALID=2 is not below the 2 tasks of node 0");
  expect_error({{"SLURM_STEP_TASKS_PER_NODE", "2,1"}}, "SLURM_STEP_TASKS_PER_NODE='2,1' sums to 3 tasks, not SLURM_NTASKS=4");
  expect_error({{"SLURM_STEP_TASKS_PER_NODE", "1(x4)"}}, "lists 4 nodes, not SLURM_STEP_NUM_NODES=2");
  expect_error({{"SLURM_STEP_TASKS_PER_NODE", "2(x"}}, "SLURM_STEP_TASKS_PER_NODE='2(x'");
  expect_error({{"SLURM_NODEID", "2"}}, "SLURM_NODEID=2 is past the step's nodes");
  expect_error({{"SLURM_STEP_TASKS_PER_NODE", "<unset>"}, {"SLURM_LOCALID", "2"}},
               "SLURM_LOCALID=2 is not below SLURM_NTASKS_PER_NODE=2");
  expect_error({{"SLURM_STEP_TASKS_PER_NODE", "<unset>"}, {"SLURM_NTASKS", "6"}, {"SLURM_STEP_NUM_TASKS", "6"}},
               "the nodes hold fewer tasks");
  expect_error({{"SLURM_STEP_NODELIST", "<unset>"}}, "SLURM_STEP_NODELIST is not set");
  expect_error({{"SLURM_STEP_NODELIST", "gpu[1-"}}, "SLURM_STEP_NODELIST: Slurm host list 'gpu[1-'");
  expect_error({{"SLURM_JOB_ID", "<unset>"}}, "SLURM_JOB_ID is not set");
  expect_error({{"SLURM_STEP_ID", "batch"}}, "SLURM_STEP_ID='batch'");
}

// Open MPI issue 13523: every task of a step believes it is alone. A one-task step that
// the other variables say is more (nodes, tasks per node) is refused, by name.
TEST(Env, SrunSingletonIsRefused) {
  const auto one = with(srun_env(0, 1, 1), {});
  EXPECT_EQ(read_launch_env(env_of(one)).world_size, 1);  // srun -N1 -n1: meant
  const std::string per_node = srun_error(with(one, {{"SLURM_NTASKS_PER_NODE", "4"}}));
  EXPECT_NE(per_node.find("SLURM_NTASKS=1, but SLURM_NTASKS_PER_NODE=4 asks for more per node"), std::string::npos)
      << per_node;
  const std::string nodes = srun_error(with(one, {{"SLURM_STEP_NUM_NODES", "2"}}));
  EXPECT_NE(nodes.find("SLURM_NTASKS=1, but SLURM_STEP_NUM_NODES=2 nodes run this step"), std::string::npos) << nodes;
  const std::string nnodes = srun_error(with(one, {{"SLURM_STEP_NUM_NODES", "<unset>"}, {"SLURM_NNODES", "3"}}));
  EXPECT_NE(nnodes.find("SLURM_NNODES=3"), std::string::npos) << nnodes;
  const std::string step = srun_error(with(one, {{"SLURM_STEP_NUM_TASKS", "8"}}));
  EXPECT_NE(step.find("SLURM_NTASKS=1 and SLURM_STEP_NUM_TASKS=8 disagree"), std::string::npos) << step;
  // Inside an allocation without srun: the error says to use it.
  EXPECT_NE(srun_error({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}}).find("start each task with srun"),
            std::string::npos);
}

TEST(Env, SrunGpusPerTask) {
  const LaunchEnv env = read_launch_env(env_of(srun_env(3, 2, 2)));  // local rank 1 of 2
  const auto gpu = [&](const std::map<std::string, std::string>& vars) { return slurm::gpu_index(env_of(vars), env); };
  EXPECT_EQ(gpu({}), 1);
  EXPECT_EQ(gpu({{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}), 1);
  EXPECT_EQ(gpu({{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "1"}}), 0);  // bound per task
  const auto gpu_error = [&](const std::map<std::string, std::string>& vars) {
    try {
      gpu(vars);
    } catch (const slurm::SlurmEnvError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(gpu_error({{"SLURM_GPUS_ON_NODE", "1"}}).find("SLURM_GPUS_ON_NODE=1 gives fewer GPUs than the 2 tasks"),
            std::string::npos)
      << gpu_error({{"SLURM_GPUS_ON_NODE", "1"}});
  EXPECT_NE(gpu_error({{"CUDA_VISIBLE_DEVICES", "0"}}).find("CUDA_VISIBLE_DEVICES='0' gives 1 GPU to the 2 tasks"),
            std::string::npos)
      << gpu_error({{"CUDA_VISIBLE_DEVICES", "0"}});
}

TEST(Env, SrunAutoBackend) {
  const LaunchEnv one_node = read_launch_env(env_of(srun_env(1, 1, 2)));
  EXPECT_EQ(resolve_backend(Backend::automatic, DeviceKind::cpu, one_node), Backend::shm);
  EXPECT_EQ(backend_reason(Backend::automatic, DeviceKind::cpu, one_node),
            "auto: 2 ranks under Slurm, 1 node, 2 on this node, all on this node, CPU tensors");
  const LaunchEnv two = read_launch_env(env_of(srun_env(1, 2, 2)));
  if (backend_built(Backend::gloo)) {
    EXPECT_EQ(resolve_backend(Backend::automatic, DeviceKind::cpu, two), Backend::hier);
    EXPECT_EQ(backend_reason(Backend::automatic, DeviceKind::cpu, two),
              "auto: 4 ranks under Slurm, 2 nodes, 2 on this node, CPU tensors: shm within each node, gloo between");
  }
  EXPECT_EQ(backend_reason(Backend::automatic, DeviceKind::cuda, two),
            "auto: 4 ranks under Slurm, 2 nodes, 2 on this node, CUDA tensors");
}

// The derived port is taken by another job's store: rank 0 hosts on the next candidate,
// and rank 1, trying the same sequence, is refused by the other job's store and finds
// rank 0's. Two threads of this process stand in for the two tasks (gloo, loopback).
TEST(Env, SrunPortTakenByAnotherJob) {
  if (!backend_built(Backend::gloo)) GTEST_SKIP() << "needs the gloo backend";
  const uint64_t job = 900000 + static_cast<uint64_t>(getpid()) % 99999;
  const std::vector<int> ports = slurm::slurm_ports(job, 0);
  std::unique_ptr<StoreServer> other;
  try {
    other = std::make_unique<StoreServer>(StoreServerOptions{"0.0.0.0", ports[0], "slurm-1.0"});
  } catch (const StoreError& e) {
    GTEST_SKIP() << "port " << ports[0] << " is taken already: " << e.what();
  }
  const auto task = [&](int rank) {
    auto vars = with(srun_env(rank, 1, 2), {{"SLURM_JOB_ID", std::to_string(job)}, {"SLURM_STEP_ID", "0"},
                                            {"SLURM_STEP_NODELIST", "localhost"}, {"SLURM_NNODES", "1"}});
    InitOptions o;
    o.backend = Backend::gloo;
    o.timeout = o.rendezvous_timeout = std::chrono::seconds(60);
    auto group = init_process_group(o, read_launch_env(env_of(vars)));
    std::vector<float> x = {static_cast<float>(rank + 1)};
    group->allreduce(cpu_buffer(x.data(), 1))->wait();
    return x[0];
  };
  auto r0 = std::async(std::launch::async, task, 0);
  auto r1 = std::async(std::launch::async, task, 1);
  EXPECT_EQ(r0.get(), 3.f);
  EXPECT_EQ(r1.get(), 3.f);
  EXPECT_GE(other->dropped_clients(), 1);  // rank 1 knocked and was refused
}

}  // namespace
}  // namespace tandem
