// tandem-train's console log: info and below to stdout, warnings and errors to
// stderr. A launcher's failure report quotes a rank's last stderr lines, so the error
// that ended a rank must be there; progress and results stay on stdout for pipes.
#pragma once

#include <memory>

#include <spdlog/logger.h>

namespace tandem {

std::shared_ptr<spdlog::logger> make_split_console_logger();

}  // namespace tandem
