// tandem-ckpt: looks at checkpoints without training anything.
//   tandem-ckpt inspect DIR [--json]   tensors (name, dtype, shape, bytes), step, epoch, config
//   tandem-ckpt verify DIR             every file, header, size and checksum: OK or each problem
//   tandem-ckpt list ROOT              the checkpoints under ROOT, newest first, and the one
//                                      --resume auto would pick
// Exit codes as tandem-train's: 0 fine, 1 any problem found (inspect verifies too), 2 usage.
#include <CLI/CLI.hpp>
#include <tandem/version.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/cli_commands.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"

namespace {

using namespace tandem;
using json = nlohmann::json;
namespace fs = std::filesystem;

void print_meta(const CheckpointMeta& m) {
  std::printf("  format %d, written %s by %s x%lld\n", m.format_version, m.created_utc.c_str(), m.mode.c_str(),
              static_cast<long long>(m.world_size));
  std::printf("  step %lld, epoch %lld, step_in_epoch %lld (%lld samples into the epoch), seed %llu\n",
              static_cast<long long>(m.step), static_cast<long long>(m.epoch),
              static_cast<long long>(m.step_in_epoch), static_cast<long long>(m.samples_in_epoch()),
              static_cast<unsigned long long>(m.seed));
  std::printf("  data %s, batch %lld per replica, replicas %lld, grad accum %lld\n",
              m.dataset.empty() ? "?" : m.dataset.c_str(), static_cast<long long>(m.batch_size),
              static_cast<long long>(m.replicas), static_cast<long long>(m.grad_accum));
  std::printf("  model %s, hidden %lld, input %s, %lld classes, %lld parameters, checksum %s\n",
              m.model_name.empty() ? "?" : m.model_name.c_str(), static_cast<long long>(m.hidden),
              shape_str(m.input_shape).c_str(), static_cast<long long>(m.classes),
              static_cast<long long>(m.parameters), m.param_checksum.c_str());
  const OptimizerConfig& o = m.optimizer;
  if (o.kind == OptimizerKind::adamw)
    std::printf("  optimizer adamw, beta1 %g, beta2 %g, eps %g, weight_decay %g, steps_taken %lld\n", o.beta1,
                o.beta2, o.eps, o.weight_decay, static_cast<long long>(m.optimizer_steps));
  else
    std::printf("  optimizer sgd, momentum %g, nesterov %s, weight_decay %g, steps_taken %lld\n", o.momentum,
                o.nesterov ? "true" : "false", o.weight_decay, static_cast<long long>(m.optimizer_steps));
  if (m.lr_schedule)
    std::printf("  lr schedule %s, base %g, min %g, warm-up %lld, total %lld steps\n", m.lr_schedule->kind.c_str(),
                m.lr_schedule->base_lr, m.lr_schedule->min_lr, static_cast<long long>(m.lr_schedule->warmup_steps),
                static_cast<long long>(m.lr_schedule->total_steps));
  for (const auto& [k, v] : m.extra) std::printf("  %s: %s\n", k.c_str(), v.c_str());
}

void print_tensors(const std::string& path, const SafetensorsHeader& h) {
  size_t width = 4;
  for (const SafetensorsEntry& e : h.tensors) width = std::max(width, e.name.size());
  std::printf("%s: %zu tensors, %llu bytes\n", fs::path(path).filename().c_str(), h.tensors.size(),
              static_cast<unsigned long long>(h.file_bytes));
  std::printf("  %-*s  %-5s  %-16s  %12s\n", static_cast<int>(width), "name", "dtype", "shape", "bytes");
  std::vector<const SafetensorsEntry*> by_name;
  for (const SafetensorsEntry& e : h.tensors) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const SafetensorsEntry* e : by_name)
    std::printf("  %-*s  %-5s  %-16s  %12llu\n", static_cast<int>(width), e->name.c_str(),
                safetensors_dtype(e->dtype), shape_str(e->shape).c_str(), static_cast<unsigned long long>(e->bytes()));
  for (const auto& [k, v] : h.metadata) std::printf("  __metadata__ %s: %s\n", k.c_str(), v.c_str());
}

json tensors_json(const SafetensorsHeader& h) {
  json tensors = json::array();
  for (const SafetensorsEntry& e : h.tensors)
    tensors.push_back({{"name", e.name}, {"dtype", safetensors_dtype(e.dtype)}, {"shape", e.shape}, {"bytes", e.bytes()}});
  return {{"bytes", h.file_bytes}, {"tensors", tensors}, {"metadata", h.metadata}};
}

int print_problems(const VerifyResult& v) {
  for (const std::string& p : v.problems) std::printf("PROBLEM: %s\n", p.c_str());
  return v.ok() ? 0 : 1;
}

int inspect(const std::string& dir, bool as_json) {
  VerifyResult v = verify_checkpoint(dir);
  json out = {{"path", dir}, {"ok", v.ok()}, {"problems", v.problems}, {"files", json::object()}};
  if (!as_json) std::printf("checkpoint %s\n", dir.c_str());
  if (v.meta) {
    if (as_json) {
      std::ifstream in((fs::path(dir) / kMetaFile).string());
      out["meta"] = json::parse(in, nullptr, false);
    } else {
      print_meta(*v.meta);
    }
  }
  std::vector<const char*> files = {kModelFile, kOptimizerFile};
  if (v.meta && v.meta->files.contains(kCommHookFile)) files.push_back(kCommHookFile);  // PowerSGD's state
  for (const char* file : files) {
    const std::string path = (fs::path(dir) / file).string();
    try {
      SafetensorsHeader h = read_safetensors_header(path);
      if (as_json) out["files"][file] = tensors_json(h);
      else print_tensors(path, h);
    } catch (const std::exception&) {
      // Already among v.problems, with the reason.
    }
  }
  if (as_json) {
    std::printf("%s\n", out.dump(2).c_str());
    return v.ok() ? 0 : 1;
  }
  if (v.ok()) std::printf("OK\n");
  return print_problems(v);
}

int verify(const std::string& dir) {
  VerifyResult v = verify_checkpoint(dir);
  if (!v.ok()) return print_problems(v);
  const CheckpointMeta& m = *v.meta;
  uint64_t bytes = 0;
  size_t tensors = 0;
  for (const auto& [name, rec] : m.files) {
    bytes += rec.bytes;
    tensors += rec.tensor_crc32.size();
  }
  std::printf("OK %s (step %lld, %zu tensors, %llu bytes, every checksum matches)\n", dir.c_str(),
              static_cast<long long>(m.step), tensors, static_cast<unsigned long long>(bytes));
  return 0;
}

int list(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    std::printf("PROBLEM: %s: no such directory\n", root.c_str());
    return 1;
  }
  std::string pick;
  for (const std::string& path : list_checkpoints(root)) {
    VerifyResult v = verify_checkpoint(path);
    if (v.ok() && pick.empty()) pick = path;
    std::printf("%s  %s\n", v.ok() ? "ok     " : "INVALID", v.ok() ? path.c_str() : (path + ": " + v.summary()).c_str());
  }
  std::printf("--resume auto would %s\n", pick.empty() ? "start from scratch" : ("resume from " + pick).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-ckpt: inspect and verify Tandem checkpoints (docs/checkpoints.md)", "tandem-ckpt"};
  app.require_subcommand(1);
  std::string dir, root;
  bool as_json = false;
  app.set_version_flag("--version", std::string("tandem-ckpt ") + TANDEM_VERSION_STRING, "Print the version and exit");
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "List tensors (name, dtype, shape, bytes), step, epoch, config");
  inspect_cmd->add_option("DIR", dir, "Checkpoint directory (ROOT/step-N)")->required();
  inspect_cmd->add_flag("--json", as_json, "Print one JSON object instead of tables");
  CLI::App* verify_cmd = app.add_subcommand("verify", "Check every file, header, size and checksum");
  verify_cmd->add_option("DIR", dir, "Checkpoint directory (ROOT/step-N)")->required();
  CLI::App* list_cmd = app.add_subcommand("list", "Checkpoints under ROOT, newest first, with their validity");
  list_cmd->add_option("ROOT", root, "The --checkpoint-dir of a run")->required();
  if (const int rc = parse_commands(app, argc, argv, "tandem-ckpt", {"inspect", "verify", "list"}); rc >= 0) return rc;
  try {
    if (*inspect_cmd) return inspect(dir, as_json);
    if (*verify_cmd) return verify(dir);
    return list(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-ckpt: %s\n", e.what());
    return 1;
  }
}
