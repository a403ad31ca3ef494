// Merges the workers' stdout and stderr onto the launcher's console, one whole line at
// a time, each prefixed "[node:rank] ", and optionally copies them to per-rank files.
// Invariants: only the launcher's main thread calls it, and every console write holds
// only complete lines (through Console, which serialises writers), so lines never
// interleave mid-line; a partial
// line waits in its stream's buffer until its newline, its process's end, or
// kMaxLineBytes (then it is cut). Log files get the bytes exactly as written,
// unprefixed. The last kTailLines stderr lines of each rank are kept for failure
// reports.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/console.h"

namespace tandem::launcher {

enum class StreamKind { out, err };

class OutputMux {
 public:
  static constexpr size_t kTailLines = 20;
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // `log_dir` empty: no files. Otherwise files go to log_dir/rank<R>.stdout|.stderr
  // (the caller picks a directory per attempt). `shows(rank)` filters the console.
  OutputMux(Console& console, int node_rank, std::string log_dir, std::function<bool(int)> shows);
  ~OutputMux();
  OutputMux(const OutputMux&) = delete;
  OutputMux& operator=(const OutputMux&) = delete;

  // Takes ownership of `fd` (a non-blocking pipe read end). Throws std::runtime_error
  // when the log file cannot be created.
  void add(int rank, StreamKind kind, int fd);
  // Open fds, for poll().
  std::vector<int> open_fds() const;
  // Reads what is available on `fd` (non-blocking); at end of file, flushes the
  // partial line and closes the stream.
  void on_readable(int fd);
  // Reads both of `rank`'s streams until they would block or end: called once the
  // process has exited, so its tail is complete before it is reported.
  void drain_rank(int rank);
  // Reads what `rank` wrote so far, flushes its partial lines and gives its stdout and
  // stderr fds back ({-1, -1} when it has none) without closing them: a worker kept for the
  // next generation (elastic recovery in memory) is added to that generation's mux.
  std::pair<int, int> release(int rank);
  // Flushes every partial line and closes every stream (the job is over).
  void close_all();

  std::vector<std::string> stderr_tail(int rank) const;

 private:
  struct Stream {
    int rank = 0;
    StreamKind kind = StreamKind::out;
    int fd = -1;
    int log_fd = -1;
    std::string partial;
  };
  // Returns false at end of file or error (the stream is then closed).
  bool read_some(Stream& s);
  void emit_line(Stream& s, std::string_view line);
  void close_stream(Stream& s);
  void flush_console();

  Console& console_;
  int node_rank_;
  std::string log_dir_;
  std::function<bool(int)> shows_;
  std::map<int, Stream> streams_;  // by fd
  std::map<int, std::deque<std::string>> tails_;
  std::string pending_out_, pending_err_;  // whole lines waiting for one console write
};

}  // namespace tandem::launcher
