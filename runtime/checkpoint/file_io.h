// Durable file I/O for checkpoints: a POSIX file descriptor that writes and reads whole
// ranges (retrying short transfers and EINTR) and fsyncs, plus directory fsync.
// Invariant: every failure throws CheckpointError naming the path and the system error, so
// a full disk or a vanished file is reported, never ignored (a short write that went
// unnoticed would leave a checkpoint that only its checksum could reveal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem {

// Every checkpoint failure: the message names the file or tensor concerned.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class File {
 public:
  enum class Mode { read, create };  // create: O_CREAT | O_TRUNC, write only

  File(const std::string& path, Mode mode);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const;  // from fstat
  void write_all(const void* data, size_t bytes);
  // Reads exactly `bytes` at `offset`; a file that ends first throws, naming the offset.
  void read_at(void* data, size_t bytes, uint64_t offset) const;
  void sync();   // fsync: data and size on disk before we rename the directory
  void close();  // checked close (NFS reports write errors here); the destructor ignores them

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// fsync of a directory, so entries created or renamed in it are durable.
void sync_directory(const std::string& path);

// "<what> <path>: <strerror(errno)>" as a CheckpointError.
[[noreturn]] void throw_errno(const std::string& what, const std::string& path);

}  // namespace tandem
