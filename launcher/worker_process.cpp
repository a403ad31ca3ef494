// fork/exec of one worker, with its own process group and death signal (see header).
#include "launcher/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

extern char** environ;

namespace tandem::launcher {

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Writes a decimal number with write(2) only (async-signal-safe).
void write_number(int fd, int value) {
  char digits[16];
  int n = 0;
  unsigned v = value < 0 ? 0u - static_cast<unsigned>(value) : static_cast<unsigned>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && n < 15);
  if (value < 0) digits[n++] = '-';
  char out[16];
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  [[maybe_unused]] ssize_t w = write(fd, out, static_cast<size_t>(n));
}

void write_text(int fd, const char* s) { [[maybe_unused]] ssize_t w = write(fd, s, std::strlen(s)); }

}  // namespace

std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) {
      throw std::runtime_error("program '" + name + "' is not an executable file");
    }
    return name;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = std::min(path.find(':', start), path.size());
    // An empty PATH entry means the current directory, as for execvp. Built by
    // appending: GCC 12 warns falsely (-Wrestrict) on `dir = "."` followed by `+`.
    std::string candidate = colon > start ? path.substr(start, colon - start) : std::string(".");
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
    start = colon + 1;
  }
  throw std::runtime_error("program '" + name + "' was not found in PATH (" + path + ")");
}

std::vector<std::string> merged_environment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> vars;
  std::vector<std::string> order;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    if (!vars.count(name)) order.push_back(name);
    vars[name] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : overrides) {
    if (!vars.count(name)) order.push_back(name);
    vars[name] = value;
  }
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const auto& name : order) out.push_back(name + "=" + vars[name]);
  return out;
}

SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& inherit_fds) {
  // Everything the child needs is built here: after fork it may not allocate.
  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (const auto& e : env) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe2 failed: ") + strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    throw std::runtime_error(std::string("pipe2 failed: ") + strerror(e));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // The launcher may have died between fork and prctl; then the death signal would
    // never come, so check that our parent is still the launcher.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Workers are not in the terminal's foreground group: reading the terminal would
    // stop them with SIGTTIN, so stdin is /dev/null.
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (const int fd : inherit_fds)
      if (fd >= 0) fcntl(fd, F_SETFD, 0);
    execve(path.c_str(), c_argv.data(), c_env.data());
    const int e = errno;
    write_text(2, "tandemrun: cannot execute ");
    write_text(2, path.c_str());
    write_text(2, ": errno ");
    write_number(2, e);
    write_text(2, "\n");
    _exit(127);
  }
  const int fork_errno = errno;
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    throw std::runtime_error(std::string("fork failed: ") + strerror(fork_errno));
  }
  // Also set the group from this side, so a signal sent right after spawn_worker
  // returns already reaches the group (the child may not have run yet). EACCES means
  // the child already exec'd, by which time it had set the group itself.
  setpgid(pid, pid);
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  return SpawnedWorker{pid, out[0], err[0]};
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 0) kill(-pgid, sig);
}

std::string signal_name(int sig) {
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

}  // namespace tandem::launcher
