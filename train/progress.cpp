#include "train/progress.h"

#include <cstdio>

namespace tandem {

ProgressBar::ProgressBar(bool enabled, std::string label, int64_t total)
    : enabled_(enabled), label_(std::move(label)), total_(total) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, double loss, double samples_per_s) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (open_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld loss %.4f %.0f samples/s\x1b[K", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), loss, samples_per_s);
  std::fflush(stderr);
  open_ = true;
}

void ProgressBar::finish() {
  if (!open_) return;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  open_ = false;
}

}  // namespace tandem
