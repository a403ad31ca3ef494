// Helpers shared by the fuzz targets of tests/fuzz (one LLVMFuzzerTestOneInput per file).
// Invariant: a helper never hides a failure of the code under test; FUZZ_CHECK aborts,
// which libFuzzer (or the replay driver under ctest) reports as a crash with the input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// A broken invariant of a parser's result: print it and abort (a crash for libFuzzer).
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace tandem::fuzz {

// An in-memory file (memfd) that parsers taking a path read through /proc/self/fd/N: no
// disk writes, one file per process, rewritten for each input.
class MemFile {
 public:
  explicit MemFile(const char* name) {
    fd_ = memfd_create(name, MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents with `bytes`; returns the path to open.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// A command line from fuzz bytes: arguments separated by NUL or newline; argv[0] is
// `program`. The strings live in `storage`, argv() points into it.
class Argv {
 public:
  Argv(const char* program, const uint8_t* data, size_t size) {
    args_.emplace_back(program);
    std::string cur;
    for (size_t i = 0; i < size; ++i) {
      const char c = static_cast<char>(data[i]);
      if (c == '\0' || c == '\n') {
        args_.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) args_.push_back(cur);
    for (std::string& a : args_) ptrs_.push_back(a.data());
    ptrs_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

// Standard output to /dev/null: --help and --version print there, thousands of times.
inline void silence_stdout() {
  std::fflush(stdout);
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::abort();
}

}  // namespace tandem::fuzz
