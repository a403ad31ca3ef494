// The launcher's console: its own stdout and stderr, shared by the output mux (main
// thread: worker lines) and the log sink (any thread: the store server logs from its
// own thread). Invariant: every write is of whole lines, made under one mutex, so no
// writer can cut into another's line.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

namespace tandem::launcher {

class Console {
 public:
  // Writes all of `text` (whole lines) to fd 1 or 2; a vanished reader is ignored.
  void write(int fd, std::string_view text);

 private:
  std::mutex mutex_;
};

// Writes all of `data` to fd, retrying short writes; false if the fd is gone.
bool write_all(int fd, std::string_view data);

// A logger whose lines ("<prefix>message") go to the console's stderr.
std::shared_ptr<spdlog::logger> make_console_logger(Console& console, const std::string& prefix);

}  // namespace tandem::launcher
