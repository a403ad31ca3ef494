// Writing, listing, pruning and choosing checkpoints (checkpoint.h). The order of the
// durable steps is the whole point: files fsynced, then the temporary directory, then the
// rename, then the root; only after that are older checkpoints deleted.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

CheckpointFileRecord record_of(const SafetensorsChecksums& s) {
  return CheckpointFileRecord{s.file_bytes, s.file_crc32, s.tensor_crc32};
}

// The pid a ".tmp-..." or ".del-..." directory name ends with, or -1.
pid_t owner_pid(const std::string& name) {
  size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 >= name.size() || name.size() - dash > 10) return -1;
  pid_t pid = 0;
  for (size_t i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

bool process_alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// Leftovers of a writer that crashed (or was killed) mid-save or mid-prune. Only one process
// writes a checkpoint root (rank 0), so a directory whose owner no longer runs on this host
// is garbage; one whose owner still runs is left alone.
void remove_stale(const fs::path& root) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-step-", 0) != 0 && name.rfind(".del-step-", 0) != 0) continue;
    const pid_t pid = owner_pid(name);
    if (pid == ::getpid() || process_alive(pid)) continue;
    std::error_code rm_ec;
    fs::remove_all(entry.path(), rm_ec);
    if (rm_ec) spdlog::warn("checkpoint: cannot remove stale {}: {}", entry.path().string(), rm_ec.message());
    else spdlog::info("checkpoint: removed {} (left by process {}, no longer running)", entry.path().string(), pid);
  }
}

// Renames the finished temporary directory to its final name, replacing a checkpoint of
// the same step atomically when there is one.
void publish(const fs::path& tmp, const fs::path& final_dir, const fs::path& root) {
  if (::rename(tmp.c_str(), final_dir.c_str()) == 0) return;
  if (errno != EEXIST && errno != ENOTEMPTY) throw_errno("cannot rename " + tmp.string() + " to", final_dir.string());
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // now holds the replaced checkpoint
    return;
  }
  // No RENAME_EXCHANGE on this file system: move the old one aside first. A crash between
  // the two renames loses that step's old copy, never an older checkpoint.
  const fs::path aside = root / (".del-" + final_dir.filename().string() + "-" + std::to_string(::getpid()));
  if (::rename(final_dir.c_str(), aside.c_str()) != 0)
    throw_errno("cannot move the old checkpoint aside:", final_dir.string());
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) throw_errno("cannot rename " + tmp.string() + " to", final_dir.string());
  std::error_code ec;
  fs::remove_all(aside, ec);
}

// Keeps the newest keep_last checkpoints of steps <= step. Failing to delete is a warning:
// the new checkpoint is already durable.
void prune(const fs::path& root, int64_t step, int keep_last) {
  int kept = 0;
  bool removed = false;
  for (const std::string& path : list_checkpoints(root.string())) {
    const int64_t s = *parse_checkpoint_step(fs::path(path).filename().string());
    if (s > step) {
      spdlog::warn("checkpoint: {} is beyond this run's step {} (left by an earlier run?); --resume auto "
                   "would pick it over the one just saved",
                   path, step);
      continue;
    }
    if (keep_last <= 0 || kept < keep_last) {
      ++kept;
      continue;
    }
    // Rename first: a crash mid-delete then leaves a hidden directory, never a half-deleted
    // step-N that --resume auto would have to reject.
    const fs::path aside = root / (".del-" + fs::path(path).filename().string() + "-" + std::to_string(::getpid()));
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      spdlog::warn("checkpoint: cannot remove old checkpoint {}: {}", path, std::strerror(errno));
      continue;
    }
    std::error_code ec;
    fs::remove_all(aside, ec);
    removed = true;
  }
  if (removed) {
    try {
      sync_directory(root.string());
    } catch (const CheckpointError& e) {
      spdlog::warn("checkpoint: {}", e.what());
    }
  }
}

}  // namespace

std::optional<int64_t> parse_checkpoint_step(const std::string& name) {
  if (name.size() <= 5 || name.size() > 5 + 18 || name.rfind("step-", 0) != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    std::optional<int64_t> step = parse_checkpoint_step(name);
    std::error_code dir_ec;
    if (step && entry.is_directory(dir_ec)) found.emplace_back(*step, name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> out;
  for (const auto& [step, name] : found) out.push_back((fs::path(root) / name).string());
  return out;
}

NamedTensors model_tensors(const Model& model) {
  NamedTensors out;
  for (const Parameter* p : model.parameters()) out.emplace_back(p->name, p->value);
  for (const ModuleBuffer* b : model.buffers()) out.emplace_back(b->name, b->value);
  return out;
}

std::string save_checkpoint(const std::string& root_dir, const Model& model, const Optimizer& optimizer,
                            const CheckpointMeta& meta, int keep_last, const TensorFile* comm_hook) {
  if (meta.step < 0) throw CheckpointError("save_checkpoint: negative step " + std::to_string(meta.step));
  const fs::path root(root_dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError("cannot create checkpoint directory " + root_dir + ": " + ec.message());
  const std::string name = checkpoint_dir_name(meta.step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);  // this process's own leftover of a failed attempt

  try {
    if (!fs::create_directory(tmp, ec) || ec)
      throw CheckpointError("cannot create " + tmp.string() + ": " + (ec ? ec.message() : "exists"));
    CheckpointMeta m = meta;
    m.format_version = kCheckpointFormatVersion;
    m.optimizer = optimizer.config();
    m.optimizer_steps = optimizer.steps_taken();
    m.parameters = model.num_parameters();
    m.param_checksum = parameter_checksum(model);
    m.created_utc = utc_now();
    m.files.clear();

    const NamedTensors params = model_tensors(model);
    const std::string step_str = std::to_string(m.step);
    // "format": "pt" is what Hugging Face loaders look for; the values are plain tensors.
    m.files[kModelFile] = record_of(write_safetensors(
        (tmp / kModelFile).string(), params, {{"format", "pt"}, {"tandem.content", "model"}, {"tandem.step", step_str}}));
    m.files[kOptimizerFile] = record_of(write_safetensors((tmp / kOptimizerFile).string(), optimizer.state(),
                                                          {{"format", "pt"},
                                                           {"tandem.content", "optimizer"},
                                                           {"tandem.step", step_str},
                                                           {"optimizer", optimizer.name()},
                                                           {"steps_taken", std::to_string(m.optimizer_steps)}}));
    if (comm_hook && !comm_hook->empty()) {
      std::map<std::string, std::string> md = comm_hook->metadata;
      md["tandem.step"] = step_str;
      m.files[kCommHookFile] = record_of(write_safetensors((tmp / kCommHookFile).string(), comm_hook->tensors, md));
    }
    const std::string text = checkpoint_meta_to_json(m);
    File meta_file((tmp / kMetaFile).string(), File::Mode::create);
    meta_file.write_all(text.data(), text.size());
    meta_file.sync();
    meta_file.close();

    sync_directory(tmp.string());
    publish(tmp, final_dir, root);
    sync_directory(root_dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw CheckpointError(std::string("saving checkpoint ") + final_dir.string() + ": " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  prune(root, meta.step, keep_last);
  remove_stale(root);
  spdlog::info("checkpoint: saved {} (step {})", final_dir.string(), meta.step);
  return final_dir.string();
}

std::string resolve_resume(const std::string& spec, const std::string& checkpoint_dir) {
  if (spec.empty()) return "";
  if (spec == "auto") {
    if (checkpoint_dir.empty()) throw std::invalid_argument("--resume auto needs --checkpoint-dir");
    const std::vector<std::string> all = list_checkpoints(checkpoint_dir);
    for (const std::string& path : all) {
      VerifyResult v = verify_checkpoint(path);
      if (v.ok()) return path;
      spdlog::warn("checkpoint {} is not usable ({}); trying the previous one", path, v.summary());
    }
    if (all.empty())
      spdlog::info("resume auto: no checkpoint in {}; starting from scratch", checkpoint_dir);
    else
      spdlog::warn("resume auto: none of the {} checkpoints in {} is valid; starting from scratch", all.size(),
                   checkpoint_dir);
    return "";
  }
  std::string path = spec;
  std::error_code ec;
  if (!fs::exists(path, ec) && !checkpoint_dir.empty() && fs::exists(fs::path(checkpoint_dir) / spec, ec))
    path = (fs::path(checkpoint_dir) / spec).string();
  if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / kMetaFile, ec) && !list_checkpoints(path).empty())
    throw CheckpointError("--resume " + spec + ": a directory of checkpoints, not one checkpoint (use --resume auto "
                          "--checkpoint-dir " + spec + ", or name one of its step-N directories)");
  VerifyResult v = verify_checkpoint(path);
  if (!v.ok()) throw CheckpointError("--resume " + spec + ": checkpoint is not usable: " + v.summary());
  return path;
}

}  // namespace tandem
