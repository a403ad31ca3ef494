// Test helper: a fresh directory under the system temp dir, removed with everything in it
// when the object goes out of scope. Names carry the pid and a counter, so parallel test
// processes and several directories in one test never collide.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace tandem::testing {

struct TempDir {
  explicit TempDir(const std::string& tag = "tandem_test")
      : path_(std::filesystem::temp_directory_path() /
              (tag + "_" + std::to_string(getpid()) + "_" + std::to_string(next_id()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  static int next_id() {
    static std::atomic<int> counter{0};
    return counter++;
  }

  std::filesystem::path path_;
};

}  // namespace tandem::testing
