// POSIX implementation of runtime/checkpoint/file_io.h.
#include "runtime/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem {

void throw_errno(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " " + path + ": " + std::strerror(errno));
}

File::File(const std::string& path, Mode mode) : path_(path) {
  const int flags = mode == Mode::read ? O_RDONLY : (O_WRONLY | O_CREAT | O_TRUNC);
  do fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw_errno(mode == Mode::read ? "cannot open" : "cannot create", path);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_errno("cannot stat", path_);
  return static_cast<uint64_t>(st.st_size);
}

void File::write_all(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Linux transfers at most ~2 GiB per call; ask for no more than 1 GiB.
    const size_t want = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    ssize_t n = ::write(fd_, p, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", path_);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void File::read_at(void* data, size_t bytes, uint64_t offset) const {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const size_t want = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    ssize_t n = ::pread(fd_, p, want, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot read", path_);
    }
    if (n == 0)
      throw CheckpointError(path_ + ": file ends at byte " + std::to_string(offset) + ", " +
                            std::to_string(bytes) + " bytes short (truncated?)");
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void File::sync() {
  if (::fsync(fd_) != 0) throw_errno("cannot fsync", path_);
}

void File::close() {
  if (fd_ < 0) return;
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_errno("cannot close", path_);
}

void sync_directory(const std::string& path) {
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("cannot open directory", path);
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); their renames are durable anyway.
  if (rc != 0 && saved != EINVAL) {
    errno = saved;
    throw_errno("cannot fsync directory", path);
  }
}

}  // namespace tandem
