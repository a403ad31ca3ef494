// signalfd for the launcher's termination and child signals (see header).
#include "launcher/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tandem::launcher {

LauncherSignals::LauncherSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw std::runtime_error("pthread_sigmask failed");
  fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd failed: ") + std::strerror(errno));
  // A console reader that goes away (tandemrun ... | head) must not kill the launcher
  // while it still has workers to stop; writes then fail with EPIPE instead.
  signal(SIGPIPE, SIG_IGN);
}

LauncherSignals::~LauncherSignals() {
  if (fd_ >= 0) close(fd_);
}

LauncherSignals::Pending LauncherSignals::drain() {
  Pending p;
  signalfd_siginfo info{};
  for (;;) {
    const ssize_t n = read(fd_, &info, sizeof(info));
    if (n != static_cast<ssize_t>(sizeof(info))) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    if (info.ssi_signo == SIGCHLD) {
      p.child = true;
    } else if (info.ssi_signo == SIGUSR1 || info.ssi_signo == SIGUSR2) {
      p.forward.push_back(static_cast<int>(info.ssi_signo));
    } else {
      p.termination = static_cast<int>(info.ssi_signo);
      if (!first_termination_) first_termination_ = p.termination;
    }
  }
  return p;
}

}  // namespace tandem::launcher
