// The split console log (see console_log.h).
#include "train/console_log.h"

#include <cstdio>
#include <mutex>

#include <spdlog/sinks/base_sink.h>

namespace tandem {

namespace {

// spdlog's sinks filter by a minimum level only; this one routes by level instead.
class SplitSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::FILE* out = msg.level >= spdlog::level::warn ? stderr : stdout;
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);  // lines reach a launcher's pipe whole and in time
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

}  // namespace

std::shared_ptr<spdlog::logger> make_split_console_logger() {
  return std::make_shared<spdlog::logger>("tandem-train", std::make_shared<SplitSink>());
}

}  // namespace tandem
