// Summary JSON writer (nlohmann-json) and timing statistics.
#include "runtime/strategy/summary.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tandem {

StepTimingStats step_timing_stats(std::vector<double> ms) {
  StepTimingStats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  auto pct = [&](double q) {
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(ms.size())));
    return ms[std::clamp<size_t>(rank, 1, ms.size()) - 1];
  };
  s.p50 = pct(0.5);
  s.p90 = pct(0.9);
  return s;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

std::optional<double> pss_mb() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  for (std::string line; std::getline(rollup, line);) {
    if (line.rfind("Pss:", 0) == 0) return std::stod(line.substr(4)) / 1024.0;  // "Pss:  123 kB"
  }
  return std::nullopt;
}

namespace {

// The shortest decimal that reads back as `v`: the value the flag was given as, where the
// double nearest the float would print 17 digits.
double shortest(float v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

}  // namespace

void write_summary_json(const RunSummary& s, const std::string& path) {
  using nlohmann::json;
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json buckets = json::array();
  for (const BucketInfo& b : s.buckets)
    buckets.push_back({{"bytes", b.bytes}, {"parameters", b.parameters}, {"comm_ms", b.comm_ms}});
  json cap_mb = nullptr, first_mb = nullptr, bucket_auto = nullptr;
  if (s.bucket_caps) {
    cap_mb = s.bucket_caps->bucket_cap_bytes / 1048576.0;
    first_mb = s.bucket_caps->first_bucket_cap_bytes / 1048576.0;
    if (const auto& c = s.bucket_caps->chosen) {
      json probe = json::array();
      for (const auto& [bytes, ms] : c->probe) probe.push_back({{"bytes", bytes}, {"ms", ms}});
      bucket_auto = {{"predicted_exposed_ms", c->predicted_exposed_ms},
                     {"before_exposed_ms", c->default_exposed_ms},
                     {"probe", probe},
                     {"before_ms", c->before_ms},
                     {"trial_ms", c->trial_ms ? json(*c->trial_ms) : json(nullptr)},
                     {"kept", c->kept}};
    }
  }
  json powersgd = nullptr;
  if (const auto& p = s.powersgd) {
    json gates = json::array();
    for (const PowerSgdBucketGate& g : p->buckets)
      gates.push_back({{"bytes", g.bytes},
                       {"sent_bytes", g.sent_bytes},
                       {"measured_ms", g.measured_ms},
                       {"predicted_ms", g.predicted_ms},
                       {"compute_ms", g.compute_ms},
                       {"compress", g.compress}});
    powersgd = {{"rank", p->rank},
                {"start_step", p->start_step},
                {"gate", p->gate},
                {"decided", p->decided},
                {"steps", p->steps},
                {"compressed_params", p->compressed_params},
                {"bytes", p->bytes},
                {"sent_bytes", p->sent_bytes},
                {"predicted_step_ms", p->predicted_step_ms},
                {"uncompressed_step_ms", p->uncompressed_step_ms},
                {"buckets", gates}};
  }
  json grad_ready = json::array();
  for (const GradReadyInfo& g : s.grad_ready)
    grad_ready.push_back({{"name", g.name}, {"bytes", g.bytes}, {"ready_ms", g.ready_ms}});
  json pss = json::array();
  for (const std::optional<double>& mb : s.pss_mb_per_rank) pss.push_back(opt(mb));
  int64_t peak_temporary = 0;
  for (int64_t bytes : s.peak_temporary_bytes_per_rank) peak_temporary = std::max(peak_temporary, bytes);
  json j = {
      {"mode", s.mode},
      {"world_size", s.world_size},
      {"replicas", s.replicas},
      {"backend", s.backend},
      {"device", s.device},
      {"model", s.model},
      {"attention", s.attention.empty() ? json(nullptr) : json(s.attention)},
      {"parameters", s.parameters},
      {"steps", s.steps},
      {"global_batch", s.global_batch},
      {"samples_per_s", s.samples_per_s},
      {"tokens_per_s", opt(s.tokens_per_s)},
      {"step_ms", {{"mean", s.step_ms.mean}, {"p50", s.step_ms.p50}, {"p90", s.step_ms.p90}}},
      {"forward_ms", s.phase_means.forward_ms},
      {"backward_ms", s.phase_means.backward_ms},
      {"comm_ms", s.phase_means.comm_ms},
      {"exposed_comm_ms", s.phase_means.exposed_comm_ms},
      {"process_cpu_ms", s.process_cpu_ms},
      {"comm_cpu_ms", opt(s.comm_cpu_ms)},
      {"optimizer_ms", s.phase_means.optimizer_ms},
      {"final_train_loss", opt(s.final_train_loss)},
      {"test_loss", opt(s.test_loss)},
      {"test_accuracy", opt(s.test_accuracy)},
      {"param_checksum", s.param_checksum},
      {"buffer_checksum", s.buffer_checksum},
      {"sync_batchnorm", s.sync_batchnorm},
      {"broadcast_buffers", s.broadcast_buffers},
      {"activation_checkpointing", s.activation_checkpointing},
      {"prefetch", s.prefetch},
      {"replicas_identical", s.replicas_identical},
      {"buckets", buckets},
      {"grad_ready", grad_ready},
      {"bucket_cap_mb", cap_mb},
      {"first_bucket_mb", first_mb},
      {"bucket_auto", bucket_auto},
      {"powersgd", powersgd},
      {"threads", s.threads},
      {"timed_steps", s.timed_steps},
      {"epochs_completed", s.epochs_completed},
      {"train_time_s", s.train_time_s},
      {"peak_rss_mb", s.peak_rss_mb},
      {"peak_rss_mb_per_rank", s.peak_rss_mb_per_rank},
      {"pss_mb_per_rank", pss},
      {"peak_device_memory_mb", opt(s.peak_device_memory_mb)},
      {"peak_temporary_bytes", peak_temporary},
      {"peak_temporary_bytes_per_rank", s.peak_temporary_bytes_per_rank},
      {"zero", s.zero},
      {"optimizer_state_mb_per_rank", s.optimizer_state_mb_per_rank},
      {"seed", s.seed},
      {"precision", s.precision},
      {"grad_reduce_dtype", s.grad_reduce_dtype},
      {"bf16_gemm", s.bf16_gemm ? json(*s.bf16_gemm) : json(nullptr)},
      {"fp32_math", s.fp32_math},
      {"cpu_kernels", s.cpu_kernels},
      {"stopped_by", s.stopped_by ? json(*s.stopped_by) : json(nullptr)},
      {"restart_count", s.restart_count},
      {"slurm_restart_count", s.slurm_restart_count},
      {"resumed_from_step", s.resumed_from_step ? json(*s.resumed_from_step) : json(nullptr)},
      {"resumed_from", s.resumed_from ? json(*s.resumed_from) : json(nullptr)},
      {"commits", s.commits},
      {"commit_ms", opt(s.commit_ms)},
      {"elastic_history", s.elastic_history_json ? json::parse(*s.elastic_history_json, nullptr, false) : json(nullptr)},
      {"elastic_batch", s.elastic_batch},
      {"base_world_size", s.base_world_size},
      {"batch_size", s.batch_size},
      {"grad_accum", s.grad_accum},
      {"lr", shortest(s.lr)},
      {"min_lr", shortest(s.min_lr)},
  };
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write summary file '" + tmp + "'");
    out << j.dump(2) << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write summary file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename summary file '" + tmp + "' to '" + path + "'");
}

}  // namespace tandem
