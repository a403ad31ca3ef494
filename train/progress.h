// A one-line progress bar on a terminal (stderr), redrawn at most ten times a second,
// so printing never shows up in step times.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, int64_t total);
  ~ProgressBar();  // finishes the line
  void update(int64_t done, double loss, double samples_per_s);
  void finish();

 private:
  bool enabled_;
  std::string label_;
  int64_t total_;
  bool open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace tandem
