// Failure records: JSON for the store, text for people (see header).
#include "launcher/failure.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "collectives/init.h"
#include "collectives/untrusted_text.h"
#include "launcher/worker_process.h"

namespace tandem::launcher {

std::string to_json(const Failure& f) {
  nlohmann::json j = {{"attempt", f.attempt},     {"node", f.node},       {"host", f.host},
                      {"rank", f.rank},           {"local_rank", f.local_rank}, {"pid", f.pid},
                      {"exit_code", f.exit_code}, {"signal", f.signal},   {"reason", f.reason},
                      {"stderr_tail", f.stderr_tail}};
  // Worker output need not be UTF-8; replace what is not rather than fail the dump.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Failure failure_from_json(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    Failure f;
    f.attempt = j.at("attempt");
    f.node = j.at("node");
    // A record another node's tandemrun wrote: escaped before anything prints it (without a
    // job secret, any process that reaches the store could have written it).
    f.host = escape_untrusted(j.at("host").get<std::string>());
    f.rank = j.at("rank");
    f.local_rank = j.at("local_rank");
    f.pid = j.at("pid");
    f.exit_code = j.at("exit_code");
    f.signal = j.at("signal");
    f.reason = escape_untrusted(j.at("reason").get<std::string>(), kUntrustedMessageBytes);
    for (const auto& line : j.at("stderr_tail").get<std::vector<std::string>>()) {
      f.stderr_tail.push_back(escape_untrusted(line, kUntrustedMessageBytes));
    }
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("malformed failure record in the store: " + escape_untrusted(e.what(), kUntrustedMessageBytes));
  }
}

std::string summarize(const Failure& f) {
  if (f.rank < 0) return f.reason;
  std::string s = "rank " + std::to_string(f.rank) + " (node " + std::to_string(f.node) + ", host " + f.host +
                  ", local rank " + std::to_string(f.local_rank) + ", pid " + std::to_string(f.pid) + ") ";
  if (f.signal > 0) {
    const char* what = strsignal(f.signal);
    s += "was killed by signal " + std::to_string(f.signal) + " (" + signal_name(f.signal) +
         (what ? std::string(": ") + what : std::string()) + ")";
  } else {
    s += "exited with code " + std::to_string(f.exit_code);
    if (f.exit_code == 127) s += " (127: the program could not be executed, or a command it ran was not found)";
    if (f.exit_code == kExitStoppedToResume)
      s += " (stopped to be resumed, after SIGUSR1) while other ranks did not: the job is neither finished nor resumable";
  }
  return s;
}

std::string report(const Failure& f) {
  std::string s = summarize(f) + "\n";
  if (f.signal == SIGKILL) {
    s += "hint: SIGKILL that nobody sent on purpose usually comes from the kernel's out-of-memory killer; "
         "check `dmesg | grep -i -e oom -e 'killed process'` on host " + f.host +
         " and lower the memory per process (batch size, processes per node)\n";
  }
  if (f.rank >= 0) {
    if (f.stderr_tail.empty()) {
      s += "rank " + std::to_string(f.rank) + " wrote nothing to stderr\n";
    } else {
      s += "last " + std::to_string(f.stderr_tail.size()) + " lines of rank " + std::to_string(f.rank) +
           "'s stderr:\n";
      for (const auto& line : f.stderr_tail) s += "  | " + line + "\n";
    }
  }
  return s;
}

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace tandem::launcher
