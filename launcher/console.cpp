// The shared console and its spdlog sink (see header).
#include "launcher/console.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <spdlog/sinks/base_sink.h>

namespace tandem::launcher {

bool write_all(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // The console may be non-blocking (set so by whoever shares it): wait until it
      // drains rather than drop or split a line.
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 60'000) <= 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

void Console::write(int fd, std::string_view text) {
  std::lock_guard<std::mutex> lock(mutex_);
  write_all(fd, text);
}

namespace {

class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(Console& console) : console_(console) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    console_.write(STDERR_FILENO, std::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}

 private:
  Console& console_;
};

}  // namespace

std::shared_ptr<spdlog::logger> make_console_logger(Console& console, const std::string& prefix) {
  auto logger = std::make_shared<spdlog::logger>("tandemrun", std::make_shared<ConsoleSink>(console));
  logger->set_pattern(prefix + "%v");
  return logger;
}

}  // namespace tandem::launcher
