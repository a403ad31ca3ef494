// The worker program the launcher tests run under tandemrun: each rank does what its
// mode says, so a test can make exact claims about output, exit codes and teardown.
//
//   launcher-test-worker [--pid-dir DIR] [--mode MODE] [--mode-for RANK=MODE]...
//
// Modes (--mode-for overrides --mode for one rank; default "ok"):
//   ok                 print "rank R done", exit 0
//   env                print "ENV NAME=value" for every variable tandemrun sets
//   serve-master-port  rank 0 listens on MASTER_PORT (as a PyTorch rank 0 hosts its
//                      TCPStore there), then a gloo all-reduce through Tandem's store,
//                      then every other rank connects to MASTER_ADDR:MASTER_PORT and
//                      sends its rank; rank 0 prints "master port P served ranks 1,2,..."
//   spam:N             N numbered lines to stdout and to stderr, each written in two
//                      pieces (so the launcher must join them), then a last line
//                      without a newline
//   exit:CODE[:LINES]  LINES numbered lines to stderr, then exit CODE
//   signal:NAME        raise SEGV | KILL | ABRT
//   pause              print "ready rank R pid P", then block in pause() until killed
//   pause-ignore-term  the same, ignoring SIGTERM (only SIGKILL ends it)
//   on-usr1:MODE       print "ready rank R pid P", wait for SIGUSR1 (sent by the test),
//                      then run MODE: the test decides when a rank fails
//   fail-attempt:K     exit 1 on attempt K (TANDEM_RESTART_COUNT), else print
//                      "TORCHELASTIC_RESTART_COUNT=n" and "RESTART_COUNT=n ok", exit 0
//   allreduce[:BACKEND] init_process_group (default gloo; "auto" picks mpi under
//                      mpirun) and an all-reduce of rank+1 over the world; prints
//                      "allreduce ok sum=S world=W rank=R backend=B" when the sum is
//                      exact, else exits 1
//   secret-fds         the job secret's reach (docs/security.md): prints "SECRET-FDS
//                      before=N" (descriptors of this process open on tandemrun's memfd),
//                      reads the launch environment as a rank does, prints "SECRET-FDS
//                      after=N", then starts itself in mode secret-child and waits for it
//   secret-child       prints "SECRET-CHILD fds=N var=V" (V: TANDEM_JOB_SECRET_FD or
//                      <unset>) and, when the variable is set, "SECRET-CHILD read: ..."
//                      with what reading the launch environment gave (the error's text)
// With --pid-dir, every rank first writes DIR/rank<R>.pid (atomically, by rename).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "collectives/init.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

void say(FILE* f, const std::string& line) {
  std::fputs((line + "\n").c_str(), f);
  std::fflush(f);
}

void write_pid_file(const std::string& dir, int rank) {
  const std::string path = dir + "/rank" + std::to_string(rank) + ".pid";
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::perror(tmp.c_str());
    std::exit(1);
  }
  std::fprintf(f, "%d\n", static_cast<int>(getpid()));
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

[[noreturn]] void block_forever(int rank, bool ignore_term) {
  if (ignore_term) signal(SIGTERM, SIG_IGN);
  say(stdout, "ready rank " + std::to_string(rank) + " pid " + std::to_string(getpid()));
  for (;;) pause();
}

int spam(int rank, int n) {
  // Each line goes out in two writes with a flush in between: the launcher sees half
  // lines and must hold them back until the newline.
  const std::string payload(100, static_cast<char>('a' + rank % 26));
  for (int i = 0; i < n; ++i) {
    for (FILE* f : {stdout, stderr}) {
      const std::string head = "rank " + std::to_string(rank) + (f == stdout ? " out " : " err ") + std::to_string(i);
      std::fputs(head.c_str(), f);
      std::fflush(f);
      std::fputs((" " + payload + "\n").c_str(), f);
      if (i % 7 == 0) std::fflush(f);
    }
  }
  std::printf("rank %d last line without newline", rank);
  std::fflush(stdout);
  return 0;
}

int allreduce(int rank, tandem::Backend backend) {
  tandem::InitOptions opts;
  opts.backend = backend;
  opts.timeout = std::chrono::seconds(60);
  opts.rendezvous_timeout = std::chrono::seconds(60);
  auto pg = tandem::init_process_group(opts);
  const int world = pg->size();
  float values[4];
  for (int i = 0; i < 4; ++i) values[i] = static_cast<float>(pg->rank() + 1) * static_cast<float>(i + 1);
  pg->allreduce(tandem::cpu_buffer(values, 4))->wait();
  const float base = static_cast<float>(world * (world + 1) / 2);
  for (int i = 0; i < 4; ++i) {
    if (values[i] != base * static_cast<float>(i + 1)) {
      say(stderr, "allreduce WRONG at " + std::to_string(i) + ": " + std::to_string(values[i]));
      return 1;
    }
  }
  say(stdout, "allreduce ok sum=" + std::to_string(static_cast<int>(base)) + " world=" + std::to_string(world) +
                  " rank=" + std::to_string(pg->rank()) + " backend=" + pg->backend_name());
  pg->barrier()->wait();
  return 0;
}

// Rank 0 serves MASTER_PORT while Tandem's collectives run on tandemrun's store: what a
// PyTorch job does with its TCPStore. Every wait is bounded (60 s).
int serve_master_port(int rank) {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port_text = std::getenv("MASTER_PORT");
  if (!addr || !port_text) {
    say(stderr, "serve-master-port: MASTER_ADDR or MASTER_PORT is not set");
    return 1;
  }
  const int port = std::atoi(port_text);
  int listener = -1;
  if (rank == 0) {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 64) != 0) {
      say(stderr, "serve-master-port: rank 0 cannot serve MASTER_PORT " + std::string(port_text) + ": " +
                      std::strerror(errno));
      return 1;
    }
  }
  tandem::InitOptions opts;
  opts.backend = tandem::Backend::gloo;
  opts.timeout = std::chrono::seconds(60);
  opts.rendezvous_timeout = std::chrono::seconds(60);
  auto pg = tandem::init_process_group(opts);
  float one = 1.0f;
  pg->allreduce(tandem::cpu_buffer(&one, 1))->wait();  // rank 0 is listening from here on
  if (one != static_cast<float>(pg->size())) {
    say(stderr, "serve-master-port: all-reduce gave " + std::to_string(one));
    return 1;
  }
  if (rank != 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(addr, port_text, &hints, &found) != 0 || !found) {
      say(stderr, "serve-master-port: cannot resolve MASTER_ADDR " + std::string(addr));
      return 1;
    }
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    const int32_t me = rank;
    if (rc != 0 || write(fd, &me, sizeof(me)) != sizeof(me)) {
      say(stderr, "serve-master-port: rank " + std::to_string(rank) + " cannot reach MASTER_ADDR:MASTER_PORT " +
                      addr + ":" + port_text + ": " + std::strerror(errno));
      return 1;
    }
    close(fd);
  } else {
    std::set<int> seen;
    while (static_cast<int>(seen.size()) < pg->size() - 1) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 60000) != 1) {
        say(stderr, "serve-master-port: only " + std::to_string(seen.size()) + " ranks connected within 60 s");
        return 1;
      }
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      int32_t who = -1;
      pollfd q{fd, POLLIN, 0};
      if (fd < 0 || poll(&q, 1, 60000) != 1 || read(fd, &who, sizeof(who)) != sizeof(who)) {
        say(stderr, "serve-master-port: a connection to MASTER_PORT sent no rank");
        return 1;
      }
      seen.insert(who);
      close(fd);
    }
    std::string ranks;
    for (int r : seen) {
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(r);
    }
    say(stdout, "master port " + std::string(port_text) + " served ranks " + ranks);
    close(listener);
  }
  pg->barrier()->wait();
  return 0;
}

// This process's descriptors open on tandemrun's job-secret memfd.
int secret_descriptors() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    n += !ec && target.string().rfind("/memfd:tandem-job-secret", 0) == 0;
  }
  return n;
}

int secret_child() {
  const char* var = std::getenv("TANDEM_JOB_SECRET_FD");
  say(stdout, "SECRET-CHILD fds=" + std::to_string(secret_descriptors()) + " var=" + (var ? var : "<unset>"));
  if (!var) return 0;
  try {
    tandem::read_launch_env(tandem::process_environment());
    say(stdout, "SECRET-CHILD read: a secret");
  } catch (const std::exception& e) {
    say(stdout, std::string("SECRET-CHILD read: ") + e.what());
  }
  return 0;
}

int secret_fds(int rank) {
  say(stdout, "SECRET-FDS rank " + std::to_string(rank) + " before=" + std::to_string(secret_descriptors()));
  tandem::read_launch_env(tandem::process_environment());
  tandem::read_launch_env(tandem::process_environment());  // a second read: from the copy kept in the process
  say(stdout, "SECRET-FDS rank " + std::to_string(rank) + " after=" + std::to_string(secret_descriptors()));
  const pid_t child = fork();
  if (child == 0) {
    execl("/proc/self/exe", "launcher-test-worker", "--mode", "secret-child", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int run_mode(const std::string& mode, int rank) {
  const auto colon = mode.find(':');
  const std::string name = mode.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : mode.substr(colon + 1);
  if (name == "ok") {
    say(stdout, "rank " + std::to_string(rank) + " done");
    return 0;
  }
  if (name == "env") {
    for (const char* v : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
                          "MASTER_PORT", "TANDEM_STORE_ADDR", "TANDEM_STORE_PORT", "TANDEM_RESTART_COUNT",
                          "TANDEM_JOB_ID", "TANDEM_STORE_HOSTED", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                          "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
                          "OPENBLAS_NUM_THREADS", "TANDEM_JOB_SECRET_FD"}) {
      const char* value = std::getenv(v);
      say(stdout, std::string("ENV ") + v + "=" + (value ? value : "<unset>"));
    }
    return 0;
  }
  if (name == "spam") return spam(rank, std::atoi(arg.c_str()));
  if (name == "exit") {
    const auto c2 = arg.find(':');
    const int code = std::atoi(arg.substr(0, c2).c_str());
    const int lines = c2 == std::string::npos ? 0 : std::atoi(arg.substr(c2 + 1).c_str());
    for (int i = 0; i < lines; ++i) say(stderr, "rank " + std::to_string(rank) + " stderr line " + std::to_string(i));
    return code;
  }
  if (name == "signal") {
    const std::map<std::string, int> sigs = {{"SEGV", SIGSEGV}, {"KILL", SIGKILL}, {"ABRT", SIGABRT}};
    say(stderr, "rank " + std::to_string(rank) + " raising SIG" + arg);
    signal(sigs.at(arg), SIG_DFL);
    raise(sigs.at(arg));
    return 99;
  }
  if (name == "on-usr1") {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, nullptr);
    say(stdout, "ready rank " + std::to_string(rank) + " pid " + std::to_string(getpid()));
    int sig = 0;
    sigwait(&usr1, &sig);
    return run_mode(arg, rank);
  }
  if (name == "pause") block_forever(rank, false);
  if (name == "pause-ignore-term") block_forever(rank, true);
  if (name == "fail-attempt") {
    const int attempt = env_int("TANDEM_RESTART_COUNT", -1);
    if (attempt == std::atoi(arg.c_str())) {
      say(stderr, "rank " + std::to_string(rank) + " failing on purpose on attempt " + std::to_string(attempt));
      return 1;
    }
    const char* torch_count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    say(stdout, "TORCHELASTIC_RESTART_COUNT=" + std::string(torch_count ? torch_count : "<unset>"));
    say(stdout, "RESTART_COUNT=" + std::to_string(attempt) + " ok");
    return 0;
  }
  if (name == "secret-fds") return secret_fds(rank);
  if (name == "secret-child") return secret_child();
  if (name == "serve-master-port") return serve_master_port(rank);
  if (name == "allreduce") return allreduce(rank, arg.empty() ? tandem::Backend::gloo : tandem::parse_backend(arg));
  say(stderr, "launcher-test-worker: unknown mode '" + mode + "'");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("RANK", env_int("OMPI_COMM_WORLD_RANK", -1));  // tandemrun or mpirun
  std::string mode = "ok";
  std::string pid_dir;
  std::map<int, std::string> per_rank;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--mode") {
      mode = value;
    } else if (flag == "--pid-dir") {
      pid_dir = value;
    } else if (flag == "--mode-for") {
      const auto eq = value.find('=');
      per_rank[std::atoi(value.substr(0, eq).c_str())] = value.substr(eq + 1);
    } else {
      say(stderr, "launcher-test-worker: unknown flag " + flag);
      return 2;
    }
  }
  if (per_rank.count(rank)) mode = per_rank[rank];
  if (!pid_dir.empty()) write_pid_file(pid_dir, rank);
  try {
    return run_mode(mode, rank);
  } catch (const std::exception& e) {
    say(stderr, std::string("launcher-test-worker: rank ") + std::to_string(rank) + ": " + e.what());
    return 1;
  }
}
