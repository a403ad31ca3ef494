// In-memory elastic recovery, the worker's side (see header).
#include "train/elastic_worker.h"

#include <poll.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "collectives/init.h"
#include "runtime/checkpoint/checkpoint.h"

namespace tandem {
namespace {

bool is_rank_zero() {
  const char* rank = std::getenv("RANK");
  return !rank || std::string(rank) == "0";
}

std::string read_whole(const std::string& path) {
  File f(path, File::Mode::read);
  std::string bytes(f.size(), '\0');
  if (!bytes.empty()) f.read_at(bytes.data(), bytes.size(), 0);
  return bytes;
}

void write_whole(const std::string& path, const std::string& bytes) {
  File f(path, File::Mode::create);
  f.write_all(bytes.data(), bytes.size());
  f.close();  // tmpfs: nothing to sync, and the commit only has to outlive the process
}

}  // namespace

std::unique_ptr<ElasticControl> ElasticControl::attach(const TrainConfig& c) {
  const char* fd = std::getenv("TANDEM_CONTROL_FD");
  const char* dir = std::getenv("TANDEM_COMMIT_DIR");
  if (!fd || !*fd || !dir || !*dir) return nullptr;
  std::string why_not;
  if (c.mode != Mode::ddp) {
    why_not = "--mode is not ddp";
  } else if (c.commit_every <= 0) {
    why_not = "--commit-every 0";
  } else if (c.backend == Backend::mpi) {
    why_not = "--backend mpi (Open MPI cannot re-form its world inside a running process)";
  } else if (c.zero > 0) {
    why_not = "--zero 1 (each rank holds only its shard of the optimizer state)";
  }
  if (!why_not.empty()) {
    if (is_rank_zero())
      spdlog::warn("elastic recovery: not in memory with {}; a change of membership restarts the workers, which "
                   "resume from the newest checkpoint (--checkpoint-dir, --resume auto)",
                   why_not);
    return nullptr;
  }
  char* end = nullptr;
  const long n = std::strtol(fd, &end, 10);
  if (*end != '\0' || n < 0) throw std::runtime_error(std::string("TANDEM_CONTROL_FD '") + fd + "' is not a descriptor");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(std::string("cannot create the commit directory ") + dir + ": " + ec.message());
  std::unique_ptr<ElasticControl> control(new ElasticControl(static_cast<int>(n), dir));
  control->report("hello");
  return control;
}

ElasticControl::~ElasticControl() { close(fd_); }

std::optional<std::string> ElasticControl::next_line(bool block) {
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, block ? -1 : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return std::nullopt;
    char chunk[4096];
    const ssize_t got = read(fd_, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw std::runtime_error("tandemrun closed the elastic control socket (the job is over or tandemrun is gone)");
    buffer_.append(chunk, static_cast<size_t>(got));
  }
}

bool ElasticControl::pause_requested() {
  while (auto line = next_line(false)) {
    if (*line == "pause") pause_ = true;
  }
  const bool asked = pause_;
  pause_ = false;
  return asked;
}

void ElasticControl::report(const std::string& line) {
  std::string text = line;
  for (char& ch : text)
    if (ch == '\n' || ch == '\r') ch = ' ';
  text += '\n';
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = write(fd_, text.data() + sent, text.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("cannot reach tandemrun: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
}

void ElasticControl::await_assignment() {
  int variables = 0;
  for (;;) {
    const std::string line = *next_line(true);
    if (line == "go") break;
    if (line == "pause") continue;  // too late: this worker is already waiting
    if (line.rfind("env ", 0) != 0 || line.find('=') == std::string::npos)
      throw std::runtime_error("tandemrun sent '" + line + "' on the elastic control socket");
    const size_t eq = line.find('=');
    ::setenv(line.substr(4, eq - 4).c_str(), line.substr(eq + 1).c_str(), 1);
    ++variables;
  }
  if (variables == 0) throw std::runtime_error("tandemrun sent an empty assignment");
}

std::string share_commit(const TrainConfig& c, const ElasticControl& control) {
  InitOptions o;
  // A host group: the commit is in host memory whatever the training backend.
  o.backend = c.backend == Backend::nccl ? Backend::automatic : c.backend;
  o.device = DeviceKind::cpu;
  o.timeout = o.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.collective_timeout_s * 1000));
  o.group_name = "commit";
  const std::shared_ptr<ProcessGroup> group = init_process_group(o);
  const int rank = group->rank();
  namespace fs = std::filesystem;
  const char* files[] = {kModelFile, kOptimizerFile, kMetaFile};
  // {step, bytes of each file}; step -1: rank 0 has no commit.
  std::vector<int64_t> header = {-1, 0, 0, 0};
  std::vector<std::string> bytes(3);
  std::string mine;
  if (rank == 0) {
    const std::vector<std::string> commits = list_checkpoints(control.commit_dir());
    if (!commits.empty()) {
      mine = commits.front();
      header[0] = read_checkpoint_meta(mine).step;
      for (int i = 0; i < 3; ++i) {
        bytes[i] = read_whole(mine + "/" + files[i]);
        header[i + 1] = static_cast<int64_t>(bytes[i].size());
      }
    }
  }
  group->broadcast(cpu_buffer(header.data(), static_cast<int64_t>(header.size())), 0)->wait();
  if (header[0] < 0) {
    if (rank == 0)
      spdlog::info("elastic recovery: rank 0 holds no commit yet; every rank resumes as configured (--resume {})",
                   c.resume.empty() ? "none" : c.resume);
    return c.resume;
  }
  for (int i = 0; i < 3; ++i) {
    bytes[i].resize(static_cast<size_t>(header[i + 1]));
    if (header[i + 1] > 0)
      group->broadcast(cpu_buffer(reinterpret_cast<uint8_t*>(bytes[i].data()), header[i + 1]), 0)->wait();
  }
  const std::string target = control.commit_dir() + "/" + checkpoint_dir_name(header[0]);
  if (rank != 0) {
    // Any other commit here is gone: one newer than rank 0's belongs to a timeline the job
    // rolled back from, and must never be shared later.
    const std::string tmp = control.commit_dir() + "/.tmp-shared-" + std::to_string(getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    for (int i = 0; i < 3; ++i) write_whole(tmp + "/" + files[i], bytes[i]);
    for (const std::string& old : list_checkpoints(control.commit_dir())) fs::remove_all(old);
    fs::rename(tmp, target);
  } else {
    for (const std::string& old : list_checkpoints(control.commit_dir()))
      if (old != mine) fs::remove_all(old);
  }
  group->barrier()->wait();  // no rank resumes before every rank has its copy
  if (rank == 0)
    spdlog::info("elastic recovery: rank 0's commit of step {} ({} bytes) sent to {} ranks; resuming from it",
                 header[0], header[1] + header[2] + header[3], group->size());
  return target;
}

}  // namespace tandem
