// tandem-bench-collectives: times collectives through Tandem's process group and,
// with --raw, through the engine called directly, as nccl-tests does (docs/reference.md).
// Run it under tandemrun or mpirun; rank 0 prints. Exit codes: 0 ok, 2 bad flags,
// 1 any other failure (including wrong results under --check).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <tandem/version.h>

#include "collectives/bench/bench_harness.h"
#include "collectives/init.h"

using namespace tandem;

namespace {

// "8", "1K", "64M", "1G" (powers of 1024) -> bytes; -1 if malformed.
int64_t parse_size(const std::string& text) {
  if (text.empty()) return -1;
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return -1;
  int64_t v = std::stoll(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  if (suffix.empty() || suffix == "B") return v;
  if (suffix == "K" || suffix == "k" || suffix == "KB") return v << 10;
  if (suffix == "M" || suffix == "m" || suffix == "MB") return v << 20;
  if (suffix == "G" || suffix == "g" || suffix == "GB") return v << 30;
  return -1;
}

OpType parse_op(const std::string& s) {
  if (s == "broadcast") return OpType::broadcast;
  if (s == "allgather") return OpType::allgather;
  if (s == "reduce-scatter") return OpType::reduce_scatter;
  return OpType::allreduce;
}

DType parse_dtype(const std::string& s) { return s == "f16" ? DType::f16 : s == "bf16" ? DType::bf16 : DType::f32; }

int usage_error(const std::string& message) {
  std::fprintf(stderr, "tandem-bench-collectives: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem-bench-collectives: collective latency and bandwidth, nccl-tests style"};
  std::string op = "allreduce", backend = "auto", min_text = "8", max_text = "64M", dtype = "f32", json_path;
  int64_t factor = 4;
  int iters = 20, warmup = 5;
  bool check = false, raw = false, wait_each = false;
  double timeout_s = 600;
  app.add_option("--op", op, "collective to time")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather", "reduce-scatter"}));
  app.add_option("--backend", backend, "engine")->check(CLI::IsMember({"auto", "mpi", "gloo", "nccl", "shm", "hier"}));
  app.add_option("-b,--minbytes", min_text, "smallest size, e.g. 8, 1K, 64M");
  app.add_option("-e,--maxbytes", max_text, "largest size");
  app.add_option("-f,--stepfactor", factor, "size multiplier between rows")->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("-n,--iters", iters, "timed iterations per size")->check(CLI::Range(1, 1 << 24));
  app.add_option("-w,--warmup_iters", warmup, "untimed iterations first")->check(CLI::Range(0, 1 << 24));
  app.add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_flag("--check", check, "check every result element against its exact value");
  app.add_flag("--raw", raw, "also time the engine called directly (MPI_* or gloo::*), taking turns with the group at each size");
  app.add_flag("--wait-each", wait_each, "wait for each op before issuing the next (one op's latency; default: issue them back to back and wait for the last)");
  app.add_option("--json", json_path, "rank 0 also writes the rows as JSON to FILE: one object per size and placement with size, count, time_us, algbw, busbw, wrong, in_place, raw");
  app.add_option("--timeout-s", timeout_s, "collective and rendezvous timeout")->check(CLI::PositiveNumber);
  app.set_version_flag("--version", std::string("tandem-bench-collectives ") + TANDEM_VERSION_STRING,
                       "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  bench::Config cfg;
  cfg.op = parse_op(op);
  cfg.backend = backend;
  cfg.min_bytes = parse_size(min_text);
  cfg.max_bytes = parse_size(max_text);
  if (cfg.min_bytes <= 0) return usage_error("-b/--minbytes: '" + min_text + "' is not a size (e.g. 8, 1K, 64M)");
  if (cfg.max_bytes <= 0) return usage_error("-e/--maxbytes: '" + max_text + "' is not a size (e.g. 8, 1K, 64M)");
  if (cfg.max_bytes < cfg.min_bytes) return usage_error("-e/--maxbytes must be at least -b/--minbytes");
  cfg.factor = factor;
  cfg.iters = iters;
  cfg.warmup = warmup;
  cfg.dtype = parse_dtype(dtype);
  cfg.check = check;
  cfg.raw = raw;
  cfg.wait_each = wait_each;
  cfg.json_path = json_path;

  int rank = -1;
  try {
    const LaunchEnv env = read_launch_env();
    rank = env.rank;
    InitOptions options;
    options.backend = parse_backend(backend);
    options.device = options.backend == Backend::nccl ? DeviceKind::cuda : DeviceKind::cpu;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    options.rendezvous_timeout = options.timeout;
    auto group = init_process_group(options, env);
    auto memory = options.device == DeviceKind::cuda ? bench::make_cuda_memory(env.local_rank) : bench::make_host_memory();
    const bool printer = group->rank() == 0;

    if (printer) bench::print_header(cfg, *group);
    auto path = bench::make_group_path(*group);
    std::vector<bench::Path*> paths{path.get()};
    std::unique_ptr<bench::Path> raw_path;
    if (cfg.raw) {
      raw_path = group->backend_name() == "mpi"    ? bench::make_raw_mpi_path(*group)
                 : group->backend_name() == "gloo" ? bench::make_raw_gloo_path(*group)
                                                   : nullptr;
      if (raw_path) paths.push_back(raw_path.get());
      else if (printer) std::printf("# --raw: no raw path for the %s backend in this build\n", group->backend_name().c_str());
    }
    std::vector<bench::Row> rows;
    for (const std::vector<bench::Row>& table : bench::run_sizes(cfg, *group, paths, *memory)) {
      if (printer && !table.empty()) bench::print_table(cfg, table.front().path, table);
      rows.insert(rows.end(), table.begin(), table.end());
    }
    int64_t wrong = 0;
    for (const auto& r : rows) wrong += r.out_of_place.wrong.value_or(0) + r.in_place.wrong.value_or(0);
    if (printer && cfg.check) std::printf("# Wrong values: %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
    if (printer && !cfg.json_path.empty()) {
      std::ofstream out(cfg.json_path);
      out << bench::rows_json(cfg, *group, rows, raw_path ? raw_path->name() : std::string()) << "\n";
      if (!out) throw std::runtime_error("cannot write --json file " + cfg.json_path);
    }
    if (wrong > 0) {
      std::fprintf(stderr, "tandem-bench-collectives: rank %d: %lld wrong result elements\n", rank,
                   static_cast<long long>(wrong));
      return 1;
    }
  } catch (const std::exception& e) {
    if (rank >= 0) {
      std::fprintf(stderr, "tandem-bench-collectives: rank %d: %s\n", rank, e.what());
    } else {
      std::fprintf(stderr, "tandem-bench-collectives: %s\n", e.what());
    }
    return 1;
  }
  return 0;
}
