// process_gone (see process_liveness.h).
#include "collectives/process_liveness.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace tandem {

bool process_gone(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  // The name in parentheses may itself contain spaces and parentheses: the state follows
  // the last ')'.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace tandem
