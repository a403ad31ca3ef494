// tandem_test_spawn: starts N real processes of one program the way a launcher
// would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT), or runs
// one command (--exec, e.g. mpirun), then checks exit codes and expected output.
//
//   tandem_test_spawn -n 3 [--store launcher|rank0] [--ranks 0,1] [--timeout-s 100]
//                     [--expect success|failure|exit:N] [--expect-output TEXT]... -- PROGRAM ARGS
//
// --store launcher (default): this driver hosts the store on a port the kernel picks
// (no race) and sets TANDEM_STORE_HOSTED=1. --store rank0: rank 0 hosts it; the port
// is found by binding port 0 and releasing it just before the ranks start.
// --ranks starts only some ranks of WORLD_SIZE (a rank that never arrives).
// Output lines are echoed prefixed "[rank] "; the whole run has a deadline after which
// every process is killed and the test fails (no hang).
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/store.h"

namespace {

struct Child {
  int rank = -1;
  pid_t pid = -1;
  int out_fd = -1;
  std::string pending;  // partial line
  int status = 0;
  bool exited = false;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "tandem_test_spawn: %s\n", msg.c_str());
  return 2;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

pid_t start(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
            int& out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // its own group: killing it also kills what it started (mpirun's ranks)
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  out_fd = fds[0];
  return pid;
}

void echo_lines(Child& c, std::string& all, bool flush) {
  size_t pos;
  while ((pos = c.pending.find('\n')) != std::string::npos || (flush && !c.pending.empty())) {
    const std::string line = pos == std::string::npos ? c.pending : c.pending.substr(0, pos);
    c.pending.erase(0, pos == std::string::npos ? c.pending.size() : pos + 1);
    if (c.rank >= 0) {
      std::printf("[%d] %s\n", c.rank, line.c_str());
    } else {
      std::printf("%s\n", line.c_str());
    }
    all += line + "\n";
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  std::string store_mode = "launcher", expect = "success";
  std::vector<int> only_ranks;
  std::vector<std::string> expect_output, program;
  bool exec_mode = false;
  double timeout_s = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-n") n = std::stoi(next());
      else if (a == "--store") store_mode = next();
      else if (a == "--ranks") {
        std::stringstream ss(next());
        for (std::string r; std::getline(ss, r, ',');) only_ranks.push_back(std::stoi(r));
      } else if (a == "--expect") expect = next();
      else if (a == "--expect-output") expect_output.push_back(next());
      else if (a == "--timeout-s") timeout_s = std::stod(next());
      else if (a == "--exec") exec_mode = true;
      else if (a == "--") {
        program.assign(argv + i + 1, argv + argc);
        break;
      } else return fail("unknown flag " + a);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }
  if (program.empty()) return fail("no program after --");

  std::unique_ptr<tandem::StoreServer> server;
  std::vector<Child> children;
  try {
    if (exec_mode) {
      Child c;
      c.pid = start(program, {}, c.out_fd);
      children.push_back(c);
    } else {
      int port;
      std::vector<std::pair<std::string, std::string>> common = {{"WORLD_SIZE", std::to_string(n)},
                                                                 {"MASTER_ADDR", "127.0.0.1"},
                                                                 {"TANDEM_JOB_ID", "spawn-" + std::to_string(getpid())}};
      if (store_mode == "launcher") {
        server = std::make_unique<tandem::StoreServer>(
            tandem::StoreServerOptions{"127.0.0.1", 0, "spawn-" + std::to_string(getpid())});
        port = server->port();
        common.push_back({"TANDEM_STORE_HOSTED", "1"});
      } else if (store_mode == "rank0") {
        port = free_port();
      } else {
        return fail("--store must be launcher or rank0");
      }
      common.push_back({"MASTER_PORT", std::to_string(port)});
      if (only_ranks.empty()) {
        for (int r = 0; r < n; ++r) only_ranks.push_back(r);
      }
      for (int r : only_ranks) {
        Child c;
        c.rank = r;
        auto env = common;
        env.push_back({"RANK", std::to_string(r)});
        env.push_back({"LOCAL_RANK", std::to_string(r)});
        c.pid = start(program, env, c.out_fd);
        children.push_back(c);
      }
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::string all_output;
  bool timed_out = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      char buf[4096];
      const ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        owners[i]->pending.append(buf, static_cast<size_t>(got));
        echo_lines(*owners[i], all_output, false);
      } else {
        echo_lines(*owners[i], all_output, true);
        close(owners[i]->out_fd);
        owners[i]->out_fd = -1;
      }
    }
  }
  if (timed_out) {
    for (auto& c : children) kill(-c.pid, SIGKILL);
  }
  bool all_ok = true, any_failed = false;
  std::string codes;
  for (auto& c : children) {
    waitpid(c.pid, &c.status, 0);
    const bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    all_ok &= ok;
    any_failed |= !ok;
    codes += (codes.empty() ? "" : ", ") + (c.rank >= 0 ? "rank " + std::to_string(c.rank) + ": " : std::string()) +
             (WIFEXITED(c.status) ? "exit " + std::to_string(WEXITSTATUS(c.status))
                                  : "signal " + std::to_string(WTERMSIG(c.status)));
  }
  std::printf("tandem_test_spawn: %s\n", codes.c_str());
  if (timed_out) {
    std::printf("tandem_test_spawn: FAIL: still running after %.0f s; killed\n", timeout_s);
    return 1;
  }
  bool pass = true;
  if (expect == "success") {
    pass = all_ok;
  } else if (expect == "failure") {
    pass = any_failed;
  } else if (expect.rfind("exit:", 0) == 0) {
    const int want = std::stoi(expect.substr(5));
    for (auto& c : children) pass &= WIFEXITED(c.status) && WEXITSTATUS(c.status) == want;
  } else {
    return fail("--expect must be success, failure or exit:N");
  }
  if (!pass) std::printf("tandem_test_spawn: FAIL: expected %s\n", expect.c_str());
  for (const auto& text : expect_output) {
    if (all_output.find(text) == std::string::npos) {
      std::printf("tandem_test_spawn: FAIL: output lacks \"%s\"\n", text.c_str());
      pass = false;
    }
  }
  if (pass) std::printf("tandem_test_spawn: PASS\n");
  return pass ? 0 : 1;
}
