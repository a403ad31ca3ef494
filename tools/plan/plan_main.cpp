// tandem-plan: predicts a DDP step on a cluster from a measured step (runtime/plan/cost_model.h,
// docs/scaling.md).
//   tandem-plan fit BENCH.json              alpha and beta from a tandem-bench-collectives run
//   tandem-plan predict --summary S.json    the step, exposed communication and efficiency
//                                           of S's model on the cluster the flags describe
// Exit codes: 0 done, 2 usage error or bad input (the message names the file), 1 other.
#include <CLI/CLI.hpp>
#include <tandem/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/cli_commands.h"
#include "runtime/plan/cost_model.h"

namespace {

using namespace tandem::plan;
using nlohmann::json;

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw InputError(path + ": not a JSON object");
  return j;
}

// A finite number >= 0 (every time and size read here is one).
double number(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number()) throw InputError(path + ": \"" + key + "\" is missing or not a number");
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < 0) throw InputError(path + ": \"" + key + "\" is negative or not finite");
  return v;
}

// A whole number in [1, 2^20] (a world size, micro-batches): checked before any conversion.
int small_count(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() < 1 || j[key].get<uint64_t>() > (1u << 20))
    throw InputError(path + ": \"" + key + "\" is missing or not a whole number in [1, 1048576]");
  return static_cast<int>(j[key].get<uint64_t>());
}

// Measured all-reduces as (bytes, seconds): a tandem-bench-collectives --json file's in-place
// rows, or a tandem-train summary's buckets (the job's own all-reduces, launch to completion).
struct Bench {
  std::string backend, source;
  int world = 0;
  std::vector<std::pair<double, double>> rows;
};

Bench read_bench(const std::string& path) {
  const json j = read_json(path);
  Bench b;
  b.backend = j.value("backend", "?");
  b.world = small_count(j, "world_size", path);
  if (j.contains("buckets") && j.contains("grad_ready")) {
    b.source = "the job's buckets";
    if (!j["buckets"].is_array()) throw InputError(path + ": \"buckets\" is not a list");
    for (const json& r : j["buckets"]) {
      if (!r.is_object()) throw InputError(path + ": a bucket is not an object");
      if (number(r, "comm_ms", path) > 0) b.rows.emplace_back(number(r, "bytes", path), number(r, "comm_ms", path) * 1e-3);
    }
  } else {
    if (j.value("op", "") != "allreduce")
      throw InputError(path + ": neither an all-reduce run of tandem-bench-collectives nor a tandem-train summary");
    b.source = "tandem-bench-collectives";
    if (!j.contains("rows") || !j["rows"].is_array()) throw InputError(path + ": no \"rows\"");
    for (const json& r : j["rows"]) {
      if (!r.is_object() || !r.value("in_place", false) || r.value("raw", false)) continue;
      b.rows.emplace_back(number(r, "size", path), number(r, "time_us", path) * 1e-6);
    }
  }
  if (b.rows.size() < 2) throw InputError(path + ": fewer than two all-reduces of different sizes to fit a line to");
  return b;
}

LineFit fit_bench(const Bench& b, const std::string& path) {
  try {
    return fit_line(b.rows);
  } catch (const std::invalid_argument& e) {
    throw InputError(path + ": " + e.what());
  }
}

std::string link_text(const Link& l) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.3g:%.4g", l.alpha_s * 1e6, 8e-9 / l.beta_s_per_byte);
  return buf;
}

int fit_command(const std::string& path) {
  const Bench b = read_bench(path);
  const LineFit f = fit_bench(b, path);
  std::printf("%s (%s): %s all-reduce over %d ranks, %zu sizes\n", path.c_str(), b.source.c_str(), b.backend.c_str(),
              b.world, b.rows.size());
  std::printf("fit: t = %.2f us + %.4f ns/B x bytes (%.2f GB/s of buffer); worst row off by %.1f%%\n", f.a_s * 1e6,
              f.b_s_per_byte * 1e9, 1e-9 / f.b_s_per_byte, f.max_rel_error * 100);
  for (const auto& [bytes, s] : b.rows)
    std::printf("  %12.0f B  measured %10.1f us  fitted %10.1f us\n", bytes, s * 1e6, (f.a_s + f.b_s_per_byte * bytes) * 1e6);
  if (b.world >= 2) {
    const Link l = link_from_ring_fit(f, b.world);
    std::printf("as a ring's link over %d ranks: alpha %.2f us, %.3g Gbit/s (pass %s as --intra or --inter)\n",
                b.world, l.alpha_s * 1e6, 8e-9 / l.beta_s_per_byte, link_text(l).c_str());
  }
  return 0;
}

// ALPHA_US:GBIT, e.g. 2:100 (2 us per message, 100 Gbit/s).
Link parse_link(const std::string& text, const char* flag) {
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t used = 0;
    const double alpha_us = std::stod(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument("alpha");
    const std::string rest = text.substr(colon + 1);
    const double gbit = std::stod(rest, &used);
    if (used != rest.size() || !(alpha_us >= 0) || !(gbit > 0) || alpha_us > 1e9 || gbit > 1e9)
      throw std::invalid_argument("range");
    return {alpha_us * 1e-6, 8e-9 / gbit};
  } catch (const std::exception&) {
    throw CLI::ValidationError(std::string(flag) + " takes ALPHA_US:GBIT (a latency in microseconds >= 0 and a "
                               "bandwidth in Gbit/s > 0, e.g. 2:100), not '" + text + "'");
  }
}

struct Profile {
  StepProfile step;
  std::string model, backend;
  int world = 1;
  double step_ms = 0, exposed_ms = 0;
};

Profile read_profile(const std::string& path, double compute_scale) {
  const json j = read_json(path);
  Profile p;
  p.model = j.value("model", "?");
  p.backend = j.value("backend", "?");
  p.world = small_count(j, "world_size", path);
  const double accum = j.contains("grad_accum") ? small_count(j, "grad_accum", path) : 1;
  if (!j.contains("step_ms") || !j["step_ms"].is_object()) throw InputError(path + ": no \"step_ms\"");
  p.step_ms = number(j["step_ms"], "mean", path);
  p.exposed_ms = number(j, "exposed_comm_ms", path);
  StepProfile& s = p.step;
  s.forward_s = number(j, "forward_ms", path) * 1e-3 / compute_scale;
  s.backward_s = number(j, "backward_ms", path) * 1e-3 / compute_scale;
  s.optimizer_s = number(j, "optimizer_ms", path) * 1e-3 / compute_scale;
  // What the phases leave out of a step (data, bookkeeping); never negative.
  s.other_s = std::max(0.0, p.step_ms * 1e-3 - (s.forward_s + s.backward_s + s.optimizer_s) * compute_scale -
                                p.exposed_ms * 1e-3) / compute_scale;
  s.backward_end_s = (s.forward_s + s.backward_s) / accum;
  if (!j.contains("grad_ready") || !j["grad_ready"].is_array() || j["grad_ready"].empty())
    throw InputError(path + ": no \"grad_ready\" profile (a DDP run of tandem-train of at least 2 steps writes one)");
  for (const json& g : j["grad_ready"]) {
    if (!g.is_object() || !g.contains("bytes") || !g["bytes"].is_number_unsigned())
      throw InputError(path + ": a grad_ready entry without a byte count");
    s.grads.push_back({g.value("name", "?"), g["bytes"].get<int64_t>(), number(g, "ready_ms", path) * 1e-3 / compute_scale});
  }
  return p;
}

struct PredictArgs {
  std::string summary, measured;
  std::vector<int> nodes = {1};
  int ranks_per_node = 0;
  std::string intra = "0:1000", inter = "0:100", algorithm = "ring", bucket_cap = "25";
  double first_bucket_mb = 1, compute_scale = 1;
  bool no_overlap = false, buckets_table = false;
};

int64_t mb(double v) { return static_cast<int64_t>(v * 1024 * 1024); }

void print_prediction(const char* label, const Prediction& p) {
  std::printf("%s step %.2f ms = compute %.2f + exposed comm %.2f (comm %.2f); efficiency %.1f%%\n", label,
              p.step_s * 1e3, p.compute_s * 1e3, p.exposed_s * 1e3, p.comm_s * 1e3, p.efficiency * 100);
}

int predict_command(const PredictArgs& a) {
  const Link intra = parse_link(a.intra, "--intra"), inter = parse_link(a.inter, "--inter");
  const Profile prof = read_profile(a.summary, a.compute_scale);
  const StepProfile& s = prof.step;
  int64_t total = 0;
  for (const GradReady& g : s.grads) total += g.bytes;
  std::printf("profile %s: %s, measured on %d rank(s) over %s; forward %.2f ms, backward %.2f ms, optimizer %.2f ms, "
              "other %.2f ms%s; %zu gradients, %.2f MB\n",
              a.summary.c_str(), prof.model.c_str(), prof.world, prof.backend.c_str(), s.forward_s * 1e3,
              s.backward_s * 1e3, s.optimizer_s * 1e3, s.other_s * 1e3,
              a.compute_scale != 1 ? " (compute scaled)" : "", s.grads.size(), total / 1e6);
  std::optional<LineFit> measured;
  CostFn measured_fn;
  if (!a.measured.empty()) {
    const Bench b = read_bench(a.measured);
    measured = fit_bench(b, a.measured);
    measured_fn = measured_cost(b.rows);
    std::printf("cost: %s (%s) as measured, between its sizes; line %.2f us + %.4f ns/B beyond (%s, %d ranks; "
                "the line's worst row off by %.1f%%)\n",
                a.measured.c_str(), b.source.c_str(), measured->a_s * 1e6, measured->b_s_per_byte * 1e9,
                b.backend.c_str(), b.world, measured->max_rel_error * 100);
  }
  const Algorithm algo = parse_algorithm(a.algorithm);
  const int p = a.ranks_per_node > 0 ? a.ranks_per_node : (a.nodes.size() == 1 && a.nodes[0] == 1 ? prof.world : 1);
  std::vector<int64_t> bytes;
  for (const GradReady& g : s.grads) bytes.push_back(g.bytes);
  for (int n : a.nodes) {
    Cluster c;
    c.nodes = n;
    c.ranks_per_node = p;
    c.intra = intra;
    c.inter = inter;
    const CostFn cost = measured ? measured_fn : CostFn([algo, c](double b) { return allreduce_seconds(algo, c, b); });
    std::printf("\n%d node(s) x %d rank(s)", n, p);
    if (!measured) std::printf(", %s all-reduce, intra %s, inter %s", algorithm_str(algo), a.intra.c_str(), a.inter.c_str());
    std::printf("\n");
    int64_t cap = 0, first = mb(a.first_bucket_mb);
    if (a.bucket_cap == "auto") {
      std::vector<int64_t> caps;
      for (double m : {0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0}) caps.push_back(mb(m));
      const BucketChoice best = best_buckets(s, cost, caps);
      const Prediction fixed = simulate(s, cut_buckets(bytes, mb(25), mb(1)), cost, !a.no_overlap);
      std::printf("auto buckets: cap %.2f MB, first %.2f MB; predicted %.2f ms against %.2f ms at 25 MB / 1 MB (%+.1f%%)\n",
                  best.cap / 1048576.0, best.first_cap / 1048576.0, best.prediction.step_s * 1e3, fixed.step_s * 1e3,
                  (fixed.step_s / best.prediction.step_s - 1) * 100);
      cap = best.cap, first = best.first_cap;
    } else {
      cap = mb(std::stod(a.bucket_cap));
    }
    const Prediction pred = simulate(s, cut_buckets(bytes, cap, first), cost, !a.no_overlap);
    std::printf("buckets (cap %.2f MB, first %.2f MB): %zu\n", cap / 1048576.0, first / 1048576.0, pred.buckets.size());
    if (a.buckets_table) {
      std::printf("  bucket        bytes   ready ms   start ms     end ms\n");
      for (size_t b = 0; b < pred.buckets.size(); ++b) {
        const BucketTiming& t = pred.buckets[b];
        std::printf("  %6zu %12lld %10.2f %10.2f %10.2f\n", b, static_cast<long long>(t.bytes), t.ready_s * 1e3,
                    t.start_s * 1e3, t.end_s * 1e3);
      }
    }
    print_prediction("predicted", pred);
    if (n * p == prof.world && a.compute_scale == 1)
      std::printf("measured  step %.2f ms, exposed comm %.2f ms (the profile's own run, %s)\n", prof.step_ms,
                  prof.exposed_ms, prof.backend.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-plan: predict a DDP step's time, exposed communication and scaling efficiency on a cluster, "
               "from a measured step (docs/scaling.md)",
               "tandem-plan"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tandem-plan ") + TANDEM_VERSION_STRING, "Print the version and exit");
  std::string bench_path;
  CLI::App* fit_cmd = app.add_subcommand("fit", "Fit t = a + b x bytes to measured all-reduces, and the ring link "
                                                "(alpha, bandwidth) it implies");
  fit_cmd->add_option("MEASURED", bench_path,
                      "tandem-bench-collectives --json output (--op allreduce), or a tandem-train --summary-json "
                      "of DDP (its buckets' comm_ms)")
      ->required();
  PredictArgs a;
  CLI::App* predict_cmd = app.add_subcommand("predict", "Predict the step of a measured model on a cluster");
  predict_cmd->add_option("--summary", a.summary, "tandem-train --summary-json of a DDP run: the phases and grad_ready")
      ->required();
  predict_cmd->add_option("--nodes", a.nodes, "Node counts to predict for (one row each), e.g. 1,8,64")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  predict_cmd->add_option("--ranks-per-node", a.ranks_per_node,
                          "Ranks per node (default: the profile's world size on one node, else 1)")
      ->check(CLI::Range(1, 1 << 16));
  predict_cmd->add_option("--intra", a.intra, "The link within a node, ALPHA_US:GBIT")->capture_default_str();
  predict_cmd->add_option("--inter", a.inter, "The link between nodes (a node's port), ALPHA_US:GBIT")
      ->capture_default_str();
  predict_cmd->add_option("--algorithm", a.algorithm, "ring, tree, two-stage or leader (Tandem's hier backend)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ring", "tree", "two-stage", "leader"}));
  predict_cmd->add_option("--measured", a.measured,
                          "All-reduces measured on exactly this cluster (tandem-bench-collectives --json, or a "
                          "summary's buckets): the all-reduce's cost, as measured between their sizes and continued "
                          "at their fitted line's slope beyond (instead of --algorithm and the links)");
  predict_cmd->add_option("--bucket-cap-mb", a.bucket_cap, "Bucket cap in MiB, or auto (the model's best)")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        try {
          size_t used = 0;
          const double d = std::stod(v, &used);
          if (used == v.size() && d > 0 && d <= 1024 * 1024) return "";
        } catch (const std::exception&) {
        }
        return "--bucket-cap-mb takes a size in MiB in (0, 1048576] or auto, not '" + v + "'";
      });
  predict_cmd->add_option("--first-bucket-mb", a.first_bucket_mb, "First bucket's cap in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1024.0 * 1024));
  predict_cmd->add_option("--compute-scale", a.compute_scale,
                          "Divide the profile's compute times by this (a device this much faster)")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1e9));
  predict_cmd->add_flag("--no-overlap", a.no_overlap, "Every bucket waits for backward's end");
  predict_cmd->add_flag("--buckets", a.buckets_table, "Print each bucket's simulated ready, start and end");
  if (const int rc = tandem::parse_commands(app, argc, argv, "tandem-plan", {"fit", "predict"}); rc >= 0) return rc;
  try {
    if (*fit_cmd) return fit_command(bench_path);
    return predict_command(a);
  } catch (const InputError& e) {
    std::fprintf(stderr, "tandem-plan: error: %s\n", e.what());
    return 2;
  } catch (const CLI::ValidationError& e) {
    std::fprintf(stderr, "tandem-plan: usage error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-plan: %s\n", e.what());
    return 1;
  }
}
