// load_weights (checkpoint.h): a checkpoint's model weights into a model that may differ
// from it, for fine-tuning. Every name, dtype and shape is compared before a byte is
// written, and every mismatch is reported at once: a user fixing a fine-tune wants the
// whole list (PyTorch's missing_keys / unexpected_keys), not one name per attempt.
#include <filesystem>
#include <map>
#include <set>
#include <spdlog/spdlog.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/freeze.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string spec(DType dtype, const Shape& shape) { return std::string(safetensors_dtype(dtype)) + " " + shape_str(shape); }

// The model file `path` names, and its meta.json record when it is a checkpoint's.
struct Source {
  std::string file;
  std::optional<CheckpointFileRecord> record;
};

Source resolve_source(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path, std::nullopt};
  if (fs::is_directory(path, ec)) {
    std::string dir = path;
    if (!fs::exists(fs::path(path) / kMetaFile, ec)) {
      // A directory of step-N checkpoints: the newest that verifies.
      std::string found;
      for (const std::string& c : list_checkpoints(path)) {
        VerifyResult v = verify_checkpoint(c);
        if (v.ok()) {
          found = c;
          break;
        }
        spdlog::warn("load_weights: checkpoint {} is not usable ({}); trying the previous one", c, v.summary());
      }
      if (found.empty() && fs::exists(fs::path(path) / kModelFile, ec))
        return {(fs::path(path) / kModelFile).string(), std::nullopt};  // a bare export, no meta.json
      if (found.empty())
        throw std::invalid_argument(path + ": no checkpoint here (expected a checkpoint directory with " +
                                    std::string(kModelFile) + " and " + kMetaFile +
                                    ", a directory of step-N checkpoints, or a .safetensors file)");
      dir = found;
    } else {
      VerifyResult v = verify_checkpoint(dir);
      if (!v.ok()) throw CheckpointError("checkpoint " + dir + " is not usable: " + v.summary());
    }
    const CheckpointMeta meta = read_checkpoint_meta(dir);
    return {(fs::path(dir) / kModelFile).string(), meta.files.at(kModelFile)};
  }
  throw std::invalid_argument(path + ": no such checkpoint directory or .safetensors file");
}

}  // namespace

LoadWeightsResult load_weights(const std::string& path, Model& model, const std::vector<std::string>& skip_patterns) {
  const Source source = resolve_source(path);
  const SafetensorsHeader header = read_safetensors_header(source.file);
  LoadWeightsResult r;
  r.source = source.file;

  // Compare everything first; nothing below the next comment runs on a mismatch.
  std::vector<std::string> missing, unexpected, reshaped;
  std::map<std::string, Tensor> into;
  std::set<std::string> names;
  for (const auto& [name, value] : model_tensors(model)) {  // buffers too: BatchNorm's statistics
    names.insert(name);
    if (matches_any(skip_patterns, name)) {
      r.skipped.push_back(name);
      continue;
    }
    const SafetensorsEntry* e = header.find(name);
    if (!e) {
      missing.push_back(name + " (" + spec(value.dtype(), value.shape()) + ")");
    } else if (e->dtype != value.dtype() || e->shape != value.shape()) {
      reshaped.push_back(name + " (" + spec(e->dtype, e->shape) + " in the checkpoint, " +
                         spec(value.dtype(), value.shape()) + " in the model)");
    } else {
      into.emplace(name, value);
      r.loaded.push_back(name);
    }
  }
  for (const SafetensorsEntry& e : header.tensors) {
    if (names.contains(e.name)) continue;
    if (matches_any(skip_patterns, e.name)) r.ignored.push_back(e.name);
    else unexpected.push_back(e.name + " (" + spec(e.dtype, e.shape) + ")");
  }
  if (!missing.empty() || !unexpected.empty() || !reshaped.empty()) {
    std::string msg = source.file + ": " + std::to_string(missing.size() + unexpected.size() + reshaped.size()) +
                      " tensor(s) do not match the model, nothing was loaded.";
    auto section = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += std::string("\n  ") + what + " (" + std::to_string(v.size()) + "):";
      for (const std::string& n : v) msg += "\n    " + n;
    };
    section("missing from the checkpoint", missing);
    section("in the checkpoint but not in the model", unexpected);
    section("with another shape or dtype", reshaped);
    msg += "\nSkip patterns (load_weights' skip_patterns, tandem-train --init-skip) name tensors that keep "
           "their fresh initialisation or are ignored";
    throw WeightsMismatch(msg, std::move(missing), std::move(unexpected), std::move(reshaped));
  }

  // Everything matches: the file's bytes into the live parameters (on any device).
  SafetensorsChecksums sums = read_safetensors_data(source.file, header, &into);
  if (source.record && sums.file_crc32 != source.record->crc32)
    throw CheckpointError(source.file + ": changed while loading (crc32 " + crc32_hex(sums.file_crc32) +
                          ", verified as " + crc32_hex(source.record->crc32) + "); the loaded weights are unusable");
  return r;
}

}  // namespace tandem
