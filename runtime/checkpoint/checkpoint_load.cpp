// Verifying and loading checkpoints (checkpoint.h). Loading is two passes over the bytes:
// verify (checksums, reading through a 4 MiB chunk) and only then, after every tensor's name,
// dtype and shape matched, a second read straight into the live tensors. The second read is
// checksummed too, so a file changed between the passes is still caught; the page cache
// makes it cheap.
#include <algorithm>
#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// meta.json is a few KB per thousand tensors; anything far bigger is not ours.
constexpr uint64_t kMaxMetaBytes = uint64_t{64} << 20;
// Past this many per-tensor mismatches in one file, the rest are summarised.
constexpr int kMaxTensorProblems = 5;

std::string join(const fs::path& dir, const char* file) { return (fs::path(dir) / file).string(); }

void verify_file(const std::string& dir, const char* file, const CheckpointMeta* meta, VerifyResult& r) {
  const std::string path = join(dir, file);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    r.problems.push_back(path + ": missing");
    return;
  }
  if (!fs::is_regular_file(path, ec)) {  // a FIFO would block the reader forever
    r.problems.push_back(path + ": not a regular file");
    return;
  }
  const CheckpointFileRecord* rec = nullptr;
  if (meta) {
    auto it = meta->files.find(file);
    if (it == meta->files.end()) r.problems.push_back(join(dir, kMetaFile) + ": no record of " + file);
    else rec = &it->second;
  }
  const uint64_t size = fs::file_size(path, ec);
  if (ec) {
    r.problems.push_back(path + ": cannot read its size: " + ec.message());
    return;
  }
  if (rec && size != rec->bytes) {
    r.problems.push_back(path + ": " + std::to_string(size) + " bytes, but meta.json records " +
                         std::to_string(rec->bytes) + (size < rec->bytes ? " (truncated)" : " (altered)"));
    return;
  }
  SafetensorsHeader header;
  try {
    header = read_safetensors_header(path);
  } catch (const std::exception& e) {
    r.problems.push_back(e.what());
    return;
  }
  if (!rec) return;  // nothing to compare the data against

  bool names_ok = true;
  for (const SafetensorsEntry& e : header.tensors)
    if (!rec->tensor_crc32.contains(e.name)) {
      r.problems.push_back(path + ": tensor '" + e.name + "' is not recorded in meta.json");
      names_ok = false;
    }
  for (const auto& [name, crc] : rec->tensor_crc32)
    if (!header.find(name)) {
      r.problems.push_back(path + ": tensor '" + name + "' recorded in meta.json is not in the file");
      names_ok = false;
    }
  if (!names_ok) return;

  SafetensorsChecksums sums = read_safetensors_data(path, header);
  int tensor_problems = 0;
  for (const SafetensorsEntry& e : header.tensors) {
    const uint32_t want = rec->tensor_crc32.at(e.name), got = sums.tensor_crc32.at(e.name);
    if (want == got) continue;
    if (++tensor_problems <= kMaxTensorProblems)
      r.problems.push_back(path + ": tensor '" + e.name + "' checksum mismatch (crc32 " + crc32_hex(got) +
                           ", meta.json records " + crc32_hex(want) + "): corrupt data");
  }
  if (tensor_problems > kMaxTensorProblems)
    r.problems.push_back(path + ": " + std::to_string(tensor_problems - kMaxTensorProblems) +
                         " more tensors with checksum mismatches");
  if (sums.file_crc32 != rec->crc32 && tensor_problems == 0)
    r.problems.push_back(path + ": checksum mismatch in the header (file crc32 " + crc32_hex(sums.file_crc32) +
                         ", meta.json records " + crc32_hex(rec->crc32) + ")");

  if (std::string(file) == kOptimizerFile) {
    auto it = header.metadata.find("steps_taken");
    if (it == header.metadata.end() || it->second != std::to_string(meta->optimizer_steps))
      r.problems.push_back(path + ": __metadata__ steps_taken " +
                           (it == header.metadata.end() ? std::string("is missing") : "'" + it->second + "'") +
                           ", meta.json says " + std::to_string(meta->optimizer_steps));
  }
}

std::string describe(const CheckpointMeta& m) {
  std::string s = "the checkpoint holds model '" + m.model_name + "'";
  if (m.model_name == "mlp") s += " with hidden " + std::to_string(m.hidden);
  if (!m.input_shape.empty()) s += ", input " + shape_str(m.input_shape);
  if (m.classes > 0) s += ", " + std::to_string(m.classes) + " classes";
  return s;
}

// Refuses (naming the first differing tensor, in the run's registration order, then any
// extra one in name order) unless the file holds exactly `expected`'s names, dtypes, shapes.
void check_same_tensors(const std::string& path, const SafetensorsHeader& header, const NamedTensors& expected,
                        const char* owner, const std::string& about) {
  std::set<std::string> names;
  for (const auto& [name, t] : expected) {
    names.insert(name);
    const SafetensorsEntry* e = header.find(name);
    const std::string here = std::string(" in this ") + owner;
    if (!e)
      throw CheckpointError(path + ": tensor '" + name + "' (" + safetensors_dtype(t.dtype()) + " " +
                            shape_str(t.shape()) + here + ") is missing from the checkpoint; " + about);
    if (e->dtype != t.dtype())
      throw CheckpointError(path + ": tensor '" + name + "' is " + safetensors_dtype(e->dtype) +
                            " in the checkpoint but " + safetensors_dtype(t.dtype()) + here + "; " + about);
    if (e->shape != t.shape())
      throw CheckpointError(path + ": tensor '" + name + "' has shape " + shape_str(e->shape) +
                            " in the checkpoint but " + shape_str(t.shape()) + here + "; " + about);
  }
  std::vector<std::string> extra;
  for (const SafetensorsEntry& e : header.tensors)
    if (!names.contains(e.name)) extra.push_back(e.name);
  if (!extra.empty()) {
    std::sort(extra.begin(), extra.end());
    throw CheckpointError(path + ": tensor '" + extra.front() + "' in the checkpoint does not exist in this " +
                          owner + "; " + about);
  }
}

// Refuses, naming every parameter concerned, a resume whose frozen set differs from the
// checkpoint's: state for a parameter this optimizer does not update, or no state at all
// for one it does (checkpoint.h says why this is refused rather than patched up).
void check_same_frozen(const std::string& path, const SafetensorsHeader& header, const Model& model,
                       const Optimizer& optimizer) {
  if (optimizer.slot_names().empty()) return;  // a stateless optimizer: nothing tells
  std::set<const Parameter*> updated(optimizer.parameters().begin(), optimizer.parameters().end());
  std::vector<std::string> frozen_now, frozen_then;
  for (const Parameter* p : model.parameters()) {
    bool any = false;
    for (const std::string& slot : optimizer.slot_names()) any = any || header.find(p->name + "." + slot);
    if (any && !updated.contains(p)) frozen_now.push_back(p->name);
    if (!any && updated.contains(p)) frozen_then.push_back(p->name);
  }
  if (frozen_now.empty() && frozen_then.empty()) return;
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  std::string msg = path + ": the checkpoint was written with other parameters frozen than this run freezes (";
  if (!frozen_now.empty()) msg += "frozen now but trained then, with optimizer state: " + names(frozen_now);
  if (!frozen_now.empty() && !frozen_then.empty()) msg += "; ";
  if (!frozen_then.empty()) msg += "trained now but frozen then, without optimizer state: " + names(frozen_then);
  msg += "). A resumed run freezes what the checkpoint's run froze; to fine-tune from its weights with a fresh "
         "optimizer, load them with --init-from (load_weights) instead of --resume";
  throw CheckpointError(msg);
}

void load_file(const std::string& path, const SafetensorsHeader& header, const NamedTensors& tensors,
               const CheckpointFileRecord& rec) {
  std::map<std::string, Tensor> into(tensors.begin(), tensors.end());
  SafetensorsChecksums sums = read_safetensors_data(path, header, &into);
  if (sums.file_crc32 != rec.crc32)
    throw CheckpointError(path + ": changed while loading (crc32 " + crc32_hex(sums.file_crc32) +
                          ", verified as " + crc32_hex(rec.crc32) + "); the loaded state is unusable");
}

void note_config_changes(const OptimizerConfig& saved, const OptimizerConfig& now) {
  auto note = [](const char* name, double a, double b) {
    if (a != b) spdlog::warn("checkpoint: optimizer {} was {} when saved, now {}", name, a, b);
  };
  note("momentum", saved.momentum, now.momentum);
  note("nesterov", saved.nesterov, now.nesterov);
  note("weight_decay", saved.weight_decay, now.weight_decay);
  if (now.kind == OptimizerKind::adamw) {
    note("beta1", saved.beta1, now.beta1);
    note("beta2", saved.beta2, now.beta2);
    note("eps", saved.eps, now.eps);
  }
}

}  // namespace

std::string VerifyResult::summary() const {
  if (problems.empty()) return "ok";
  std::string s;
  for (const std::string& p : problems) s += (s.empty() ? "" : "; ") + p;
  return s;
}

CheckpointMeta read_checkpoint_meta(const std::string& dir) {
  const std::string path = join(dir, kMetaFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(path + ": missing");
  if (!fs::is_regular_file(path, ec)) throw CheckpointError(path + ": not a regular file");
  File file(path, File::Mode::read);
  const uint64_t size = file.size();
  if (size > kMaxMetaBytes) throw CheckpointError(path + ": " + std::to_string(size) + " bytes, too large to be ours");
  std::string text(size, '\0');
  file.read_at(text.data(), size, 0);
  return checkpoint_meta_from_json(text, path);
}

VerifyResult verify_checkpoint(const std::string& dir) {
  VerifyResult r;
  try {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      r.problems.push_back(dir + (fs::exists(dir, ec) ? ": not a directory" : ": no such checkpoint directory"));
      return r;
    }
    try {
      r.meta = read_checkpoint_meta(dir);
    } catch (const std::exception& e) {
      r.problems.push_back(e.what());
    }
    if (r.meta) {
      fs::path p = fs::path(dir).lexically_normal();
      std::string name = p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
      std::optional<int64_t> named = parse_checkpoint_step(name);
      if (named && *named != r.meta->step)
        r.problems.push_back(dir + ": the directory name says step " + std::to_string(*named) + " but meta.json says " +
                             std::to_string(r.meta->step));
    }
    std::vector<const char*> files = {kModelFile, kOptimizerFile};
    if (r.meta && r.meta->files.contains(kCommHookFile)) files.push_back(kCommHookFile);
    for (const char* file : files) {
      try {
        verify_file(dir, file, r.meta ? &*r.meta : nullptr, r);
      } catch (const std::exception& e) {
        r.problems.push_back(e.what());
      }
    }
  } catch (const std::exception& e) {
    r.problems.push_back(dir + ": " + e.what());
  }
  return r;
}

CheckpointMeta load_checkpoint(const std::string& dir, Model& model, Optimizer* optimizer) {
  VerifyResult v = verify_checkpoint(dir);
  if (!v.ok()) throw CheckpointError("checkpoint " + dir + " is not usable: " + v.summary());
  const CheckpointMeta& meta = *v.meta;
  const std::string about = describe(meta);

  // Validate everything first: nothing below the next comment may run on a mismatch.
  const std::string model_path = join(dir, kModelFile);
  const SafetensorsHeader model_header = read_safetensors_header(model_path);
  NamedTensors params = model_tensors(model);
  check_same_tensors(model_path, model_header, params, "model", about);

  const std::string optimizer_path = join(dir, kOptimizerFile);
  SafetensorsHeader optimizer_header;
  NamedTensors state;
  if (optimizer) {
    if (optimizer->config().kind != meta.optimizer.kind)
      throw CheckpointError(dir + ": written with optimizer " +
                            (meta.optimizer.kind == OptimizerKind::adamw ? "adamw" : "sgd") + ", this run uses " +
                            optimizer->name() + " (use the same --optimizer)");
    optimizer_header = read_safetensors_header(optimizer_path);
    state = optimizer->state();
    check_same_frozen(optimizer_path, optimizer_header, model, *optimizer);
    check_same_tensors(optimizer_path, optimizer_header, state, "optimizer", about);
    note_config_changes(meta.optimizer, optimizer->config());
  }

  // Everything matches: now write into the live tensors.
  load_file(model_path, model_header, params, meta.files.at(kModelFile));
  if (optimizer) {
    load_file(optimizer_path, optimizer_header, state, meta.files.at(kOptimizerFile));
    optimizer->set_steps_taken(meta.optimizer_steps);
  }
  if (!meta.param_checksum.empty()) {
    const std::string got = parameter_checksum(model);
    if (got != meta.param_checksum)
      throw CheckpointError(dir + ": loaded parameters hash to " + got + " but meta.json records " +
                            meta.param_checksum);
  }
  spdlog::info("checkpoint: loaded {} (step {}, epoch {}, batch {} of it; written by {} x{})", dir, meta.step,
               meta.epoch, meta.step_in_epoch, meta.mode, meta.world_size);
  return meta;
}

}  // namespace tandem
