// parallelize and the loaders that go with a strategy.
#include "runtime/strategy/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/kernels.h"

#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/ddp.h"
#include "runtime/strategy/single.h"

namespace tandem {

const char* mode_str(Mode mode) {
  switch (mode) {
    case Mode::single: return "single";
    case Mode::dp: return "dp";
    case Mode::ddp: return "ddp";
  }
  return "?";
}

Mode parse_mode(std::string_view name) {
  if (name == "single") return Mode::single;
  if (name == "dp") return Mode::dp;
  if (name == "ddp") return Mode::ddp;
  throw std::invalid_argument("unknown mode '" + std::string(name) + "' (expected single, dp or ddp)");
}

int default_cpu_threads(int requested) {
  if (requested > 0) return requested;
  // SLURM_CPUS_PER_TASK: srun -c N gave this task N cores.
  for (const char* var : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"}) {
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  int local = 1;
  for (const char* var : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local);
}

std::shared_ptr<ProcessGroup> init_group(const ParallelOptions& o) {
  InitOptions io;
  io.backend = o.backend;
  // mpi, gloo, shm and hier reduce host memory: the strategy stages GPU buckets through pinned
  // host memory, so their group is a host group even for CUDA replicas.
  const bool host_backend = o.backend == Backend::mpi || o.backend == Backend::gloo || o.backend == Backend::shm ||
                            o.backend == Backend::hier;
  io.device = host_backend ? DeviceKind::cpu : o.device.kind;
  io.timeout = o.timeout;
  io.rendezvous_timeout = o.timeout;  // waiting for a peer to arrive is waiting for a peer
  return init_process_group(io);
}

std::unique_ptr<Strategy> parallelize(const ModelFactory& make_model, const OptimizerConfig& optimizer,
                                      const ParallelOptions& o, Tracer* tracer) {
  if (!make_model) throw std::invalid_argument("parallelize: no model factory");
  if (o.mode != Mode::dp && o.devices != 1)
    throw std::invalid_argument("parallelize: devices = " + std::to_string(o.devices) + " needs Mode::dp");
  if (o.mode != Mode::ddp && (o.comm_hook != CommHookKind::none || o.custom_comm_hook))
    throw std::invalid_argument("parallelize: a comm hook needs Mode::ddp");
  if (o.zero_stage < 0 || o.zero_stage > 1)
    throw std::invalid_argument("parallelize: zero_stage " + std::to_string(o.zero_stage) +
                                " is not built (0: off, 1: shard the optimizer state)");
  if (o.mode != Mode::ddp && o.zero_stage != 0)
    throw std::invalid_argument("parallelize: zero_stage needs Mode::ddp (it shards the state across processes)");
  if (o.sync_batchnorm && o.mode == Mode::ddp && o.uneven_inputs == UnevenInputs::join)
    throw std::invalid_argument(
        "parallelize: sync_batchnorm needs every rank to run every forward; uneven_inputs join lets a rank "
        "without data skip them (use throw_on_early_termination or drop the sync)");
  set_cpu_threads(o.mode == Mode::dp ? 1 : default_cpu_threads(o.cpu_threads));
  auto build = [&] {
    std::unique_ptr<Model> m = make_model();
    if (!m) throw std::invalid_argument("parallelize: the model factory returned no model");
    m->set_precision(o.precision);
    return m;
  };
  switch (o.mode) {
    case Mode::single: {
      auto s = std::make_unique<SingleStrategy>(build(), optimizer, o.device, o.loss);
      s->model().set_tracer(tracer);
      s->set_metrics(o.metrics);
      return s;
    }
    case Mode::dp: {
      if (o.devices < 1) throw std::invalid_argument("parallelize: devices must be >= 1");
      std::vector<std::unique_ptr<Model>> models;
      std::vector<Device> devices;
      for (int d = 0; d < o.devices; ++d) {
        models.push_back(build());
        devices.push_back(o.device.is_cuda() ? Device::cuda(d) : o.device);
      }
      auto s = std::make_unique<DataParallelStrategy>(std::move(models), optimizer, devices, o.loss);
      s->set_metrics(o.metrics);
      s->set_sync_batchnorm(o.sync_batchnorm, o.timeout);
      return s;
    }
    case Mode::ddp: {
      std::shared_ptr<ProcessGroup> group = o.group ? o.group : init_group(o);
      ReducerOptions ro;
      ro.bucket_cap_bytes = static_cast<size_t>(o.bucket_cap_mb * 1024 * 1024);
      ro.first_bucket_cap_bytes =
          std::min(ro.bucket_cap_bytes, static_cast<size_t>(o.first_bucket_mb * 1024 * 1024));
      // Three timed steps after the first (untimed) one: the profile the choice is made on.
      ro.auto_buckets_after = o.bucket_cap_auto ? 3 : 0;
      ro.overlap = o.overlap;
      ro.communicate = o.communicate;
      ro.find_unused = o.find_unused_parameters;
      ro.hook = o.comm_hook;
      ro.custom_hook = o.custom_comm_hook;
      ro.powersgd = o.powersgd;
      ro.timeout = o.timeout;
      ro.zero_stage = o.zero_stage;
      auto s = std::make_unique<DdpStrategy>(build(), optimizer, o.device, std::move(group), ro, tracer, o.loss);
      s->set_metrics(o.metrics);
      s->set_uneven_inputs(o.uneven_inputs);
      s->set_broadcast_buffers(o.broadcast_buffers);
      s->set_sync_batchnorm(o.sync_batchnorm);
      return s;
    }
  }
  throw std::invalid_argument("parallelize: unknown mode");
}

namespace {
bool ddp(const Strategy& s) { return s.mode() == std::string("ddp"); }
}  // namespace

std::unique_ptr<BatchSource> training_batches(std::shared_ptr<const Dataset> dataset, int64_t batch_size,
                                              const Strategy& strategy, uint64_t seed) {
  if (!dataset) throw std::invalid_argument("training_batches: no dataset");
  SamplerOptions so;
  so.num_replicas = ddp(strategy) ? strategy.replicas() : 1;
  so.rank = strategy.rank();
  so.seed = seed;
  const int64_t per_process = ddp(strategy) ? batch_size : batch_size * strategy.replicas();
  const int64_t size = dataset->size;
  return std::make_unique<DataLoader>(std::move(dataset), DistributedSampler(size, so), per_process, true);
}

std::unique_ptr<BatchSource> training_batches(std::shared_ptr<const TextDataset> text, int64_t context,
                                              int64_t batch_size, const Strategy& strategy, uint64_t seed) {
  const bool d = ddp(strategy);
  return std::make_unique<TextLoader>(std::move(text), context, d ? batch_size : batch_size * strategy.replicas(),
                                      d ? strategy.replicas() : 1, strategy.rank(), seed);
}

std::unique_ptr<BatchSource> evaluation_batches(std::shared_ptr<const Dataset> dataset, int64_t batch_size) {
  if (!dataset) throw std::invalid_argument("evaluation_batches: no dataset");
  SamplerOptions so;
  so.shuffle = false;
  so.pad = false;
  const int64_t size = dataset->size;
  return std::make_unique<DataLoader>(std::move(dataset), DistributedSampler(size, so), batch_size, false);
}

}  // namespace tandem
