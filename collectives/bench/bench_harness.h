// The benchmark harness: for each size, fills inputs so every result is exactly
// predictable (small integers per rank, which sum exactly even in bf16), checks once,
// then times warm-up + iterations, out of place and in place, as nccl-tests does.
// Invariant: all ranks run the same sequence of collectives; only rank 0 prints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/process_group.h"

namespace tandem::bench {

struct Config {
  OpType op = OpType::allreduce;
  std::string backend = "auto";
  int64_t min_bytes = 8;
  int64_t max_bytes = 64 << 20;
  int64_t factor = 4;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;
  bool check = false;
  bool raw = false;
  // Wait for each op before issuing the next: the latency a blocking caller sees (the
  // hand-off to the comm thread and back), not the pipelined rate.
  bool wait_each = false;
  std::string json_path;
  int root = 0;
};

// A way to run one collective: through the process group, or the engine directly.
class Path {
 public:
  virtual ~Path() = default;
  virtual std::string name() const = 0;
  // Issues c (seq is ignored); returns something to wait on, or runs it to completion.
  virtual std::shared_ptr<Work> issue(const Collective& c) = 0;
  // Waits for everything issued (host-blocking).
  virtual void drain(std::shared_ptr<Work> last) = 0;
};

std::unique_ptr<Path> make_group_path(ProcessGroup& group);
// The engine called directly; nullptr when the backend has no raw path in this build.
std::unique_ptr<Path> make_raw_mpi_path(ProcessGroup& group);
std::unique_ptr<Path> make_raw_gloo_path(ProcessGroup& group);

// Host or device memory for the benchmark's buffers (device = CUDA for nccl).
struct Memory {
  virtual ~Memory() = default;
  virtual Device device() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
};
std::unique_ptr<Memory> make_host_memory();
std::unique_ptr<Memory> make_cuda_memory(int device_index);  // throws without CUDA

struct Cell {
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  std::optional<int64_t> wrong;  // empty without --check
};
struct Row {
  std::string path;
  int64_t bytes = 0;
  int64_t count = 0;
  Cell out_of_place;
  Cell in_place;
};

// Runs every size on every path, the paths taking turns at each size (so drift in the
// machine's speed during a run does not favour the path measured first); returns one
// table of rows per path, the same on all ranks.
std::vector<std::vector<Row>> run_sizes(const Config& config, ProcessGroup& group, const std::vector<Path*>& paths,
                                        Memory& memory);

void print_header(const Config& config, const ProcessGroup& group);
void print_table(const Config& config, const std::string& title, const std::vector<Row>& rows);
// --json: {"op", "backend", ..., "rows": [{"path", "raw", "in_place", "size", "count",
// "time_us", "algbw", "busbw", "wrong"}, ...]}; "raw" is true on rows of `raw_path`.
std::string rows_json(const Config& config, const ProcessGroup& group, const std::vector<Row>& rows,
                      const std::string& raw_path);

}  // namespace tandem::bench
