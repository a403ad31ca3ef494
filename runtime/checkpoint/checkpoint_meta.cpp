// meta.json <-> CheckpointMeta. Reading type-checks every field it uses, so a hand-edited
// or corrupted meta.json gives a CheckpointError naming the file and the field.
#include "runtime/checkpoint/checkpoint_meta.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// Hyperparameters are floats: print their shortest spelling (0.9, not 0.8999999761581421);
// reading the double back and narrowing gives the same float.
double float_for_json(float f) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf - 1, f);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Field access that names the file and field on any mismatch.
struct Fields {
  const json& obj;
  std::string where;  // "<path>: optimizer"

  const json& at(const char* key) const {
    if (!obj.is_object()) throw CheckpointError(where + " is not an object");
    auto it = obj.find(key);
    if (it == obj.end()) throw CheckpointError(where + ": missing \"" + key + "\"");
    return *it;
  }
  bool has(const char* key) const { return obj.is_object() && obj.contains(key) && !obj.at(key).is_null(); }
  [[noreturn]] void bad(const char* key, const char* expected) const {
    throw CheckpointError(where + ": \"" + key + "\" is not " + expected);
  }
  int64_t i64(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
      bad(key, "an integer");
    return v.get<int64_t>();
  }
  int64_t count(const char* key) const {
    int64_t v = i64(key);
    if (v < 0) bad(key, "a non-negative integer");
    return v;
  }
  uint64_t u64(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned()) bad(key, "a non-negative integer");
    return v.get<uint64_t>();
  }
  double num(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) bad(key, "a number");
    return v.get<double>();
  }
  // A float hyperparameter: finite as a float, so it is written back as a number.
  float f32(const char* key) const {
    const double v = num(key);
    if (!(std::fabs(v) <= std::numeric_limits<float>::max())) bad(key, "a number within float range");
    return static_cast<float>(v);
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean()) bad(key, "true or false");
    return v.get<bool>();
  }
  std::string str(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) bad(key, "a string");
    return v.get<std::string>();
  }
  Fields sub(const char* key) const { return {at(key), where + ": " + key}; }
};

uint32_t parse_crc(const std::string& hex, const std::string& where) {
  uint32_t crc = 0;
  auto res = std::from_chars(hex.data(), hex.data() + hex.size(), crc, 16);
  if (hex.size() != 8 || res.ec != std::errc() || res.ptr != hex.data() + hex.size())
    throw CheckpointError(where + ": checksum \"" + hex.substr(0, 16) + "\" is not 8 hex digits");
  return crc;
}

// Insertion-ordered, so a reader of the file sees step and epoch first.
nlohmann::ordered_json to_json(const CheckpointMeta& m) {
  using ojson = nlohmann::ordered_json;
  ojson files = ojson::object();
  for (const auto& [name, rec] : m.files) {
    ojson tensors = ojson::object();
    for (const auto& [t, crc] : rec.tensor_crc32) tensors[t] = crc32_hex(crc);
    files[name] = {{"bytes", rec.bytes}, {"crc32", crc32_hex(rec.crc32)}, {"tensors", tensors}};
  }
  const OptimizerConfig& o = m.optimizer;
  ojson j = {
      {"format", "tandem-checkpoint"},
      {"format_version", m.format_version},
      {"step", m.step},
      {"epoch", m.epoch},
      {"step_in_epoch", m.step_in_epoch},
      {"seed", m.seed},
      {"data",
       {{"dataset", m.dataset},
        {"batch_size", m.batch_size},
        {"replicas", m.replicas},
        {"grad_accum", m.grad_accum},
        {"samples_in_epoch", m.samples_in_epoch()}}},
      {"model",
       {{"name", m.model_name},
        {"hidden", m.hidden},
        {"input_shape", m.input_shape},
        {"classes", m.classes},
        {"parameters", m.parameters},
        {"param_checksum", m.param_checksum}}},
      {"optimizer",
       {{"kind", o.kind == OptimizerKind::adamw ? "adamw" : "sgd"},
        {"momentum", float_for_json(o.momentum)},
        {"nesterov", o.nesterov},
        {"weight_decay", float_for_json(o.weight_decay)},
        {"beta1", float_for_json(o.beta1)},
        {"beta2", float_for_json(o.beta2)},
        {"eps", float_for_json(o.eps)},
        {"steps_taken", m.optimizer_steps}}},
      {"lr_schedule", nullptr},
      {"rng",
       {{"kind", "stateless"},
        {"note", "sampler order = permutation(seed, epoch) and parameter init = f(seed, name) are pure "
                 "functions: seed and (epoch, step_in_epoch) are the whole data-order state"}}},
      {"writer", {{"mode", m.mode}, {"world_size", m.world_size}, {"created_utc", m.created_utc}}},
      {"extra", m.extra},
      {"files", files},
  };
  if (m.lr_schedule) {
    const LrScheduleInfo& s = *m.lr_schedule;
    j["lr_schedule"] = {{"kind", s.kind},
                        {"base_lr", s.base_lr},
                        {"min_lr", s.min_lr},
                        {"warmup_steps", s.warmup_steps},
                        {"total_steps", s.total_steps}};
  }
  return j;
}

}  // namespace

LoaderPosition CheckpointMeta::position_for(int64_t new_batch_size, int64_t new_replicas) const {
  int64_t global = 0;
  const bool too_big = __builtin_mul_overflow(new_batch_size, new_replicas, &global);
  if (batch_size <= 0 || (!too_big && batch_size * replicas == global)) return position();
  const int64_t samples = samples_in_epoch();
  if (too_big || global <= 0 || samples % global != 0)
    throw CheckpointError("cannot continue the exact data order: the checkpoint consumed " +
                          std::to_string(samples) + " samples of epoch " + std::to_string(epoch) +
                          ", not a whole number of micro-batches of " +
                          (too_big ? std::string("over 2^63") : std::to_string(global)) + " (" +
                          std::to_string(new_batch_size) + " x " + std::to_string(new_replicas) + " replicas)");
  return {epoch, samples / global};
}

std::string checkpoint_meta_to_json(const CheckpointMeta& meta) {
  try {
    nlohmann::ordered_json j = to_json(meta);
    // The checksum covers the compact dump with sorted keys, which a reader recomputes from
    // the parsed object, so neither indentation nor key order in the file matters.
    j["meta_crc32"] = crc32_hex(crc32_of(json::parse(j.dump()).dump()));
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // a string that is not UTF-8
    throw CheckpointError(std::string("cannot encode meta.json: ") + e.what());
  }
}

CheckpointMeta checkpoint_meta_from_json(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw CheckpointError(path + ": not a valid JSON object");
  try {
    Fields top{j, path};
    if (top.str("format") != "tandem-checkpoint") throw CheckpointError(path + ": \"format\" is not tandem-checkpoint");
    const uint32_t stored = parse_crc(top.str("meta_crc32"), path);
    json rest = j;
    rest.erase("meta_crc32");
    if (crc32_of(rest.dump()) != stored)
      throw CheckpointError(path + ": checksum mismatch (meta_crc32 " + crc32_hex(stored) + ", contents " +
                            crc32_hex(crc32_of(rest.dump())) + "): the file is corrupt");

    CheckpointMeta m;
    const int64_t version = top.i64("format_version");
    if (version > kCheckpointFormatVersion || version < 1)
      throw CheckpointError(path + ": format version " + std::to_string(version) +
                            " (this build reads up to " + std::to_string(kCheckpointFormatVersion) + ")");
    m.format_version = static_cast<int>(version);
    m.step = top.count("step");
    m.epoch = top.count("epoch");
    m.step_in_epoch = top.count("step_in_epoch");
    m.seed = top.u64("seed");

    Fields data = top.sub("data");
    m.dataset = data.str("dataset");
    m.batch_size = data.count("batch_size");
    m.replicas = data.count("replicas");
    m.grad_accum = data.count("grad_accum");
    // samples_in_epoch() and position_for() multiply these.
    int64_t product = 0;
    if (__builtin_mul_overflow(m.step_in_epoch, m.batch_size, &product) ||
        __builtin_mul_overflow(product, m.replicas, &product) ||
        __builtin_mul_overflow(m.batch_size, m.replicas, &product))
      throw CheckpointError(path + ": step_in_epoch x data.batch_size x data.replicas overflows");

    Fields model = top.sub("model");
    m.model_name = model.str("name");
    m.hidden = model.count("hidden");
    const json& shape = model.at("input_shape");
    if (!shape.is_array()) model.bad("input_shape", "an array");
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > INT64_MAX) model.bad("input_shape", "an array of sizes");
      m.input_shape.push_back(d.get<int64_t>());
    }
    m.classes = model.count("classes");
    m.parameters = model.count("parameters");
    m.param_checksum = model.str("param_checksum");

    Fields opt = top.sub("optimizer");
    m.optimizer.kind = parse_optimizer_kind(opt.str("kind"));
    m.optimizer.momentum = opt.f32("momentum");
    m.optimizer.nesterov = opt.boolean("nesterov");
    m.optimizer.weight_decay = opt.f32("weight_decay");
    m.optimizer.beta1 = opt.f32("beta1");
    m.optimizer.beta2 = opt.f32("beta2");
    m.optimizer.eps = opt.f32("eps");
    m.optimizer_steps = opt.count("steps_taken");

    if (top.has("lr_schedule")) {
      Fields s = top.sub("lr_schedule");
      m.lr_schedule = LrScheduleInfo{s.str("kind"), s.num("base_lr"), s.num("min_lr"), s.count("warmup_steps"),
                                     s.count("total_steps")};
    }

    Fields writer = top.sub("writer");
    m.mode = writer.str("mode");
    m.world_size = writer.count("world_size");
    m.created_utc = writer.str("created_utc");

    if (top.has("extra")) {
      Fields extra = top.sub("extra");
      if (!extra.obj.is_object()) top.bad("extra", "an object");
      for (const auto& [k, v] : extra.obj.items()) {
        if (!v.is_string()) extra.bad(k.c_str(), "a string");
        m.extra[k] = v.get<std::string>();
      }
    }

    Fields files = top.sub("files");
    if (!files.obj.is_object()) top.bad("files", "an object");
    for (const auto& [name, value] : files.obj.items()) {
      Fields f{value, files.where + ": " + name};
      CheckpointFileRecord rec;
      rec.bytes = f.u64("bytes");
      rec.crc32 = parse_crc(f.str("crc32"), f.where);
      Fields tensors = f.sub("tensors");
      if (!tensors.obj.is_object()) f.bad("tensors", "an object");
      for (const auto& [t, crc] : tensors.obj.items()) {
        if (!crc.is_string()) tensors.bad(t.c_str(), "a checksum string");
        rec.tensor_crc32[t] = parse_crc(crc.get<std::string>(), tensors.where + ": " + t);
      }
      m.files[name] = std::move(rec);
    }
    return m;
  } catch (const nlohmann::json::exception& e) {  // defensive: every access above is type-checked
    throw CheckpointError(path + ": malformed: " + e.what());
  } catch (const std::invalid_argument& e) {  // parse_optimizer_kind
    throw CheckpointError(path + ": " + e.what());
  }
}

}  // namespace tandem
