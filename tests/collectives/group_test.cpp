// Single-process tests of the collectives layer: half-precision conversions and
// reductions, environment parsing, the ProcessGroup contract (argument checks,
// sequence numbers, unsupported ops) on a fake backend, and the comm thread's order
// and broken-group behaviour. Multi-process behaviour is in worker.cpp.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <future>
#include <map>

#include <gtest/gtest.h>

#include "collectives/comm_thread.h"
#include "collectives/init.h"
#include "collectives/reduce_kernels.h"
#include "tests/collectives/fake_env.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Half, F16ConversionsRoundToNearestEven) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // halfway past the largest: inf
  EXPECT_EQ(float_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie: to even (down)
  EXPECT_EQ(float_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // tie: to even (up)
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: to even
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half round-trips exactly
    ASSERT_EQ(float_to_f16(f16_to_float(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(Half, Bf16ConversionsRoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie: to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  for (int i = 0; i <= 256; ++i) EXPECT_EQ(bf16_to_float(float_to_bf16(static_cast<float>(i))), i);
}

TEST(Reduce, HalfSumsGoThroughFloat) {
  // 2048 + 1 is not representable in f16 (spacing 2): a correct f16 sum rounds to even.
  uint16_t a[2] = {float_to_f16(2048), float_to_f16(3)}, b[2] = {float_to_f16(1), float_to_f16(4)}, out[2];
  reduce_elements(DType::f16, ReduceOp::sum, out, a, b, 2);
  EXPECT_EQ(f16_to_float(out[0]), 2048);
  EXPECT_EQ(f16_to_float(out[1]), 7);
  uint16_t x[3] = {float_to_bf16(1), float_to_bf16(-5), float_to_bf16(7)};
  uint16_t y[3] = {float_to_bf16(2), float_to_bf16(3), float_to_bf16(-7)};
  uint16_t r[3];
  reduce_elements(DType::bf16, ReduceOp::max, r, x, y, 3);
  EXPECT_EQ(bf16_to_float(r[0]), 2);
  EXPECT_EQ(bf16_to_float(r[1]), 3);
  EXPECT_EQ(bf16_to_float(r[2]), 7);
  int64_t p[2] = {7, -7};
  divide_elements(DType::i64, p, 2, 2);
  EXPECT_EQ(p[0], 3);
  EXPECT_EQ(p[1], -3);
}

std::string env_error(std::map<std::string, std::string> vars) {
  try {
    read_launch_env(env_of(std::move(vars)));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// What `requested` resolves to on the CPU, where the build has that backend; where it has
// not (the arm64 cross build has neither gloo nor mpi), resolve_backend refuses instead.
void expect_resolves_to(Backend expected, Backend requested, const LaunchEnv& env) {
  if (backend_built(expected)) {
    EXPECT_EQ(resolve_backend(requested, DeviceKind::cpu, env), expected);
  } else {
    EXPECT_THROW(resolve_backend(requested, DeviceKind::cpu, env), std::invalid_argument);
  }
}

TEST(Env, LauncherVariables) {
  const LaunchEnv env = read_launch_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                                {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                                {"TANDEM_JOB_ID", "j1"}, {"TANDEM_STORE_HOSTED", "1"}}));
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.job_id, "j1");
  EXPECT_TRUE(env.store_hosted);
  EXPECT_FALSE(env.under_mpirun);
  expect_resolves_to(Backend::gloo, Backend::automatic, env);
}

// tandemrun's store is at TANDEM_STORE_ADDR:TANDEM_STORE_PORT; MASTER_PORT is the job's own.
TEST(Env, TandemStoreVariablesComeFirst) {
  const LaunchEnv env = read_launch_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                                                {"MASTER_PORT", "29501"}, {"TANDEM_STORE_ADDR", "10.0.0.9"},
                                                {"TANDEM_STORE_PORT", "29500"}, {"TANDEM_STORE_HOSTED", "1"},
                                                {"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  EXPECT_EQ(env.master_addr, "10.0.0.9");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_TRUE(env.store_hosted);
  const std::map<std::string, std::string> rank = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(rank.begin(), rank.end());
    return extra;
  };
  EXPECT_EQ(env_error(with({{"TANDEM_STORE_ADDR", "h"}})),
            "environment variable TANDEM_STORE_PORT is not set (TANDEM_STORE_ADDR is set)");
  EXPECT_EQ(env_error(with({{"TANDEM_STORE_PORT", "2"}})),
            "environment variable TANDEM_STORE_ADDR is not set (TANDEM_STORE_PORT is)");
  EXPECT_NE(env_error(with({{"TANDEM_STORE_ADDR", "h"}, {"TANDEM_STORE_PORT", "0"}})).find("TANDEM_STORE_PORT='0'"),
            std::string::npos);
  // Under torchrun, MASTER_PORT is its agent's PyTorch store: refused by name, never spoken to.
  const std::string torchrun = env_error(with({{"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(torchrun.rfind("environment variable TORCHELASTIC_USE_AGENT_STORE=True: torchrun started this process", 0),
            0u)
      << torchrun;
  EXPECT_NE(torchrun.find("TANDEM_STORE_ADDR and TANDEM_STORE_PORT"), std::string::npos) << torchrun;
  // ... unless the program was given a store of its own.
  EXPECT_EQ(read_launch_env(env_of(with({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TANDEM_STORE_ADDR", "s"},
                                         {"TANDEM_STORE_PORT", "7"}})))
                .master_port,
            7);
}

// auto picks shm when the launcher says every rank is on this node, gloo otherwise.
TEST(Env, AutoPicksShmOnOneNode) {
  const auto env_with = [](const char* local_world) {
    return read_launch_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                   {"LOCAL_WORLD_SIZE", local_world}, {"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", "29500"}}));
  };
  const LaunchEnv local = env_with("2");
  EXPECT_EQ(local.local_world_size, 2);
  EXPECT_EQ(resolve_backend(Backend::automatic, DeviceKind::cpu, local), Backend::shm);
  EXPECT_EQ(backend_reason(Backend::automatic, DeviceKind::cpu, local), "auto: 2 ranks, all on this node, CPU tensors");
  expect_resolves_to(Backend::gloo, Backend::automatic, env_with("1"));
  EXPECT_EQ(resolve_backend(Backend::shm, DeviceKind::cpu, env_with("1")), Backend::shm);  // asked for
  EXPECT_THROW(resolve_backend(Backend::shm, DeviceKind::cuda, local), std::invalid_argument);
  EXPECT_EQ(parse_backend("shm"), Backend::shm);
  EXPECT_TRUE(backend_built(Backend::shm));
  // hier is never what auto means; asked for, it stays on the host.
  EXPECT_EQ(resolve_backend(Backend::hier, DeviceKind::cpu, env_with("1")), Backend::hier);
  EXPECT_THROW(resolve_backend(Backend::hier, DeviceKind::cuda, local), std::invalid_argument);
  EXPECT_EQ(parse_backend("hier"), Backend::hier);
  EXPECT_STREQ(backend_str(Backend::hier), "hier");
}

TEST(Env, MpirunVariables) {
  const LaunchEnv env = read_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_TRUE(env.under_mpirun);
  EXPECT_TRUE(env.master_addr.empty());
  expect_resolves_to(Backend::mpi, Backend::automatic, env);
  EXPECT_THROW(resolve_backend(Backend::gloo, DeviceKind::cpu, env), std::invalid_argument);  // no store
}

TEST(Env, ErrorsNameTheVariable) {
  EXPECT_NE(env_error({}).find("RANK is not set"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "0"}, {"WORLD_SIZE", "two"}}).find("WORLD_SIZE='two'"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "5"}, {"WORLD_SIZE", "2"}}).find("RANK='5'"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}})
                .find("MASTER_PORT='99999'"),
            std::string::npos);
  EXPECT_THROW(parse_backend("tcp"), std::invalid_argument);
}

TEST(Env, CollectiveChecksSwitch) {
  const std::map<std::string, std::string> base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "1"}};
  EXPECT_TRUE(read_launch_env(env_of(base)).collective_checks);  // on by default
  auto with = [&](const std::string& v) {
    auto vars = base;
    vars["TANDEM_COLLECTIVE_CHECKS"] = v;
    return vars;
  };
  EXPECT_FALSE(read_launch_env(env_of(with("0"))).collective_checks);
  EXPECT_TRUE(read_launch_env(env_of(with("1"))).collective_checks);
  EXPECT_NE(env_error(with("off")).find("TANDEM_COLLECTIVE_CHECKS='off' must be 1"), std::string::npos)
      << env_error(with("off"));
}

// A backend that implements allreduce only (completing at once), to test the
// ProcessGroup contract without any engine.
class FakeGroup : public ProcessGroup {
 public:
  FakeGroup() : ProcessGroup(Setup{"fake", 0, 2, seconds(5), nullptr, nullptr}) {}

 protected:
  std::shared_ptr<Work> run_allreduce(const Collective& c) override {
    auto w = std::make_shared<CompletionWork>(c, timeout(), nullptr);
    w->finish();
    return w;
  }
  bool accepts(Device d) const override { return d.is_cpu(); }
};

TEST(ProcessGroup, UnsupportedOpNamesBackendAndOpAndConsumesNoSeq) {
  FakeGroup g;
  float data[4] = {};
  EXPECT_EQ(g.allreduce(cpu_buffer(data, 4))->seq(), 1u);
  try {
    g.allgather(cpu_buffer(data, 2), cpu_buffer(data, 4));
    FAIL() << "allgather accepted by a backend without it";
  } catch (const UnsupportedOp& e) {
    EXPECT_STREQ(e.what(), "the fake backend does not support allgather");
  }
  EXPECT_THROW(g.barrier(), UnsupportedOp);
  EXPECT_EQ(g.last_seq(), 1u);
  EXPECT_EQ(g.allreduce(cpu_buffer(data, 4))->seq(), 2u);
}

TEST(ProcessGroup, ArgumentsAreChecked) {
  FakeGroup g;
  float a[4] = {}, b[3] = {};
  EXPECT_THROW(g.allreduce(cpu_buffer(a, 4), cpu_buffer(b, 3)), std::invalid_argument);
  int32_t i[4] = {};
  EXPECT_THROW(g.allreduce(cpu_buffer(a, 4), cpu_buffer(i, 4)), std::invalid_argument);  // dtypes differ
  EXPECT_THROW(g.allgather(cpu_buffer(a, 3)), std::invalid_argument);  // 3 is not a multiple of 2
  EXPECT_THROW(g.broadcast(cpu_buffer(a, 4), 2), std::invalid_argument);  // root out of range
  Buffer on_gpu{a, 4, DType::f32, Device::cuda(0)};
  EXPECT_THROW(g.allreduce(on_gpu), std::invalid_argument);
  EXPECT_THROW(g.allreduce(Buffer{nullptr, 4, DType::f32, Device::cpu()}), std::invalid_argument);
  EXPECT_EQ(g.last_seq(), 0u);
}

TEST(ProcessGroup, DescribeNamesOpSeqAndBytes) {
  Collective c;
  c.op = OpType::allreduce;
  c.seq = 7;
  float x[1024];
  c.in = c.out = cpu_buffer(x, 1024);
  EXPECT_EQ(c.describe(), "allreduce #7 (f32 sum, 4096 bytes)");
}

TEST(CommThread, RunsInOrderAndFailsEverythingAfterAFailure) {
  CommThread thread("test");
  std::vector<int> order;
  std::vector<std::shared_ptr<CompletionWork>> works;
  for (int k = 0; k < 5; ++k) {
    Collective c;
    c.seq = static_cast<uint64_t>(k + 1);
    works.push_back(std::make_shared<CompletionWork>(c, seconds(5), nullptr));
    thread.submit(works.back(), [k, &order] {
      order.push_back(k);
      if (k == 2) throw std::runtime_error("engine said no");
    });
  }
  try {
    works.back()->wait(seconds(10));
    FAIL() << "an op after a failed one succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("was not run: the process group is broken"), std::string::npos) << e.what();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));  // 3 and 4 never reached the engine
  EXPECT_TRUE(works[1]->is_success());
  EXPECT_EQ(works[2]->error_message(), "engine said no");
  EXPECT_TRUE(works[3]->is_completed());
  EXPECT_FALSE(thread.shutdown(seconds(10)));  // nothing stuck: joined, not abandoned
}

TEST(CommThread, AFailedOpIsNotTakenForAStuckOneAtShutdown) {
  // The caller wakes as soon as the op fails and may shut down at once: the thread
  // must be joined, not abandoned as if still inside the engine.
  CommThread thread("test");
  Collective c;
  c.seq = 1;
  auto work = std::make_shared<CompletionWork>(c, seconds(5), nullptr);
  thread.submit(work, [] { throw std::runtime_error("ranks disagree"); });
  EXPECT_THROW(work->wait(seconds(10)), std::runtime_error);
  EXPECT_FALSE(thread.shutdown(seconds(10)));
}

TEST(CompletionWork, KnowsWhenItFinished) {
  // The reducer's trace and comm_ms take the finishing time from here, not from when
  // the training thread got round to waiting.
  Collective c;
  c.seq = 1;
  CompletionWork work(c, seconds(5), nullptr);
  EXPECT_FALSE(work.completed_at().has_value());
  const auto before = std::chrono::steady_clock::now();
  work.finish();
  const auto after = std::chrono::steady_clock::now();
  ASSERT_TRUE(work.completed_at().has_value());
  EXPECT_GE(*work.completed_at(), before);
  EXPECT_LE(*work.completed_at(), after);
}

TEST(CommThread, AWriteToAPeerThatIsGoneFailsTheOpAndDoesNotKillTheProcess) {
  // Gloo writes with writev: on a socket whose other end is closed that raises SIGPIPE,
  // whose default action would kill this process (an elastic job's survivor with it).
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  close(pair[1]);
  CommThread thread("test");
  Collective c;
  c.seq = 1;
  auto work = std::make_shared<CompletionWork>(c, seconds(5), nullptr);
  const int fd = pair[0];
  thread.submit(work, [fd] {
    const char byte = 1;
    if (write(fd, &byte, 1) < 0) throw std::runtime_error(std::string("write: ") + std::strerror(errno));
  });
  EXPECT_THROW(work->wait(seconds(10)), std::runtime_error);
  EXPECT_EQ(work->error_message(), std::string("write: ") + std::strerror(EPIPE));
  EXPECT_FALSE(thread.shutdown(seconds(10)));
  close(fd);
}

TEST(CommThread, WaitTimeoutReportsThroughTheGroup) {
  CommThread thread("test");
  Collective c;
  c.op = OpType::barrier;
  c.seq = 1;
  std::promise<void> release;
  auto gate = release.get_future().share();
  auto work = std::make_shared<CompletionWork>(c, seconds(5), [](const Collective& op, milliseconds waited) {
    return op.describe() + " waited " + std::to_string(waited.count()) + " ms";
  });
  thread.submit(work, [gate] { gate.wait(); });
  try {
    work->wait(milliseconds(50));
    FAIL() << "a blocked op completed";
  } catch (const CollectiveTimeout& e) {
    EXPECT_STREQ(e.what(), "barrier #1 waited 50 ms");
  }
  EXPECT_FALSE(work->is_completed());
  release.set_value();
  work->wait(seconds(10));
  EXPECT_TRUE(work->is_success());
}

}  // namespace
}  // namespace tandem
