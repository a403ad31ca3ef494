// Line-whole console output and per-rank log files (see header).
#include "launcher/output_mux.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::launcher {

OutputMux::OutputMux(Console& console, int node_rank, std::string log_dir, std::function<bool(int)> shows)
    : console_(console), node_rank_(node_rank), log_dir_(std::move(log_dir)), shows_(std::move(shows)) {}

OutputMux::~OutputMux() { close_all(); }

void OutputMux::add(int rank, StreamKind kind, int fd) {
  Stream s;
  s.rank = rank;
  s.kind = kind;
  s.fd = fd;
  if (!log_dir_.empty()) {
    const std::string path =
        log_dir_ + "/rank" + std::to_string(rank) + (kind == StreamKind::out ? ".stdout" : ".stderr");
    // 0600, also for a file an earlier run left: a rank's output may hold data or paths.
    s.log_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (s.log_fd >= 0) fchmod(s.log_fd, 0600);
    if (s.log_fd < 0) {
      close(fd);
      throw std::runtime_error("cannot create log file " + path + ": " + std::strerror(errno));
    }
  }
  streams_[fd] = std::move(s);
}

std::vector<int> OutputMux::open_fds() const {
  std::vector<int> fds;
  for (const auto& [fd, s] : streams_) fds.push_back(fd);
  return fds;
}

void OutputMux::emit_line(Stream& s, std::string_view line) {
  if (s.kind == StreamKind::err) {
    auto& tail = tails_[s.rank];
    tail.emplace_back(line);
    if (tail.size() > kTailLines) tail.pop_front();
  }
  if (!shows_(s.rank)) return;
  std::string& out = s.kind == StreamKind::out ? pending_out_ : pending_err_;
  out += '[';
  out += std::to_string(node_rank_);
  out += ':';
  out += std::to_string(s.rank);
  out += "] ";
  out.append(line);
  out += '\n';
}

bool OutputMux::read_some(Stream& s) {
  char buf[64 * 1024];
  // A bounded number of reads per call keeps one chatty rank from starving the others
  // (and the signal fd) in the poll loop.
  for (int round = 0; round < 16; ++round) {
    const ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    if (s.log_fd >= 0) write_all(s.log_fd, std::string_view(buf, static_cast<size_t>(n)));
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      if (s.partial.empty()) {
        emit_line(s, std::string_view(buf + start, i - start));
      } else {
        s.partial.append(buf + start, i - start);
        emit_line(s, s.partial);
        s.partial.clear();
      }
      start = i + 1;
    }
    s.partial.append(buf + start, static_cast<size_t>(n) - start);
    if (s.partial.size() >= kMaxLineBytes) {
      emit_line(s, s.partial);
      s.partial.clear();
    }
  }
  return true;
}

void OutputMux::flush_console() {
  if (!pending_out_.empty()) {
    console_.write(STDOUT_FILENO, pending_out_);
    pending_out_.clear();
  }
  if (!pending_err_.empty()) {
    console_.write(STDERR_FILENO, pending_err_);
    pending_err_.clear();
  }
}

void OutputMux::close_stream(Stream& s) {
  if (!s.partial.empty()) {
    emit_line(s, s.partial);  // the process ended mid-line: show it as a whole line
    s.partial.clear();
  }
  close(s.fd);
  if (s.log_fd >= 0) close(s.log_fd);
}

void OutputMux::on_readable(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  if (!read_some(it->second)) {
    close_stream(it->second);
    streams_.erase(it);
  }
  flush_console();
}

void OutputMux::drain_rank(int rank) {
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& s = it->second;
    bool open = true;
    if (s.rank == rank) {
      // The process is gone, so what it wrote is all in the pipe; a descendant that
      // still holds the pipe is read later by the poll loop.
      for (;;) {
        if (!(open = read_some(s))) break;
        pollfd p{s.fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP))) break;
      }
    }
    if (!open) {
      close_stream(s);
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  flush_console();
}

std::pair<int, int> OutputMux::release(int rank) {
  std::pair<int, int> fds{-1, -1};
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& s = it->second;
    if (s.rank != rank) {
      ++it;
      continue;
    }
    const bool open = read_some(s);
    if (!s.partial.empty()) {
      emit_line(s, s.partial);
      s.partial.clear();
    }
    if (s.log_fd >= 0) close(s.log_fd);
    if (open) {
      (s.kind == StreamKind::out ? fds.first : fds.second) = s.fd;
    } else {
      close(s.fd);
    }
    it = streams_.erase(it);
  }
  flush_console();
  return fds;
}

void OutputMux::close_all() {
  for (auto& [fd, s] : streams_) close_stream(s);
  streams_.clear();
  flush_console();
}

std::vector<std::string> OutputMux::stderr_tail(int rank) const {
  auto it = tails_.find(rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace tandem::launcher
