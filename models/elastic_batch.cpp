// The batch and learning rate across a change of world size (see header).
#include "models/elastic_batch.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <stdexcept>

#include "collectives/init.h"
#include "runtime/checkpoint/checkpoint.h"

namespace tandem {

ElasticBatchPlan plan_elastic_batch(ElasticBatch policy, const CheckpointMeta& m, int64_t batch_size,
                                    int64_t grad_accum, double lr, int64_t world) {
  ElasticBatchPlan p{batch_size, grad_accum, lr, m.replicas, ""};
  if (auto it = m.extra.find(kBaseWorldKey); it != m.extra.end()) {
    try {
      p.base_world = std::stoll(it->second);
    } catch (const std::exception&) {
      throw std::runtime_error("the checkpoint's " + std::string(kBaseWorldKey) + " '" + it->second +
                               "' is not a number");
    }
  }
  if (p.base_world < 1) p.base_world = m.replicas > 0 ? m.replicas : world;
  if (policy == ElasticBatch::off || m.replicas == world || m.replicas < 1 || m.batch_size < 1) return p;
  const std::string change = "world size " + std::to_string(m.replicas) + " -> " + std::to_string(world);
  if (policy == ElasticBatch::per_rank) {
    p.lr = lr * static_cast<double>(world) / static_cast<double>(p.base_world);
    p.note = change + ": per-rank batch " + std::to_string(batch_size) + " kept, learning rate " + std::to_string(lr) +
             " x " + std::to_string(world) + "/" + std::to_string(p.base_world) + " = " + std::to_string(p.lr) +
             " (--elastic-batch per-rank)";
    return p;
  }
  const int64_t global = m.batch_size * m.replicas * std::max<int64_t>(1, m.grad_accum);
  if (global % (world * grad_accum) == 0) {
    p.batch_size = global / (world * grad_accum);
  } else if (global % (world * batch_size) == 0) {
    p.grad_accum = global / (world * batch_size);
  } else {
    throw std::runtime_error(change + ": the checkpoint's global batch " + std::to_string(global) +
                             " is not a whole number of per-rank batches at world size " + std::to_string(world) +
                             " (neither --grad-accum " + std::to_string(grad_accum) + " nor --batch-size " +
                             std::to_string(batch_size) + " fits); give --batch-size and --grad-accum that do, or "
                             "--elastic-batch per-rank");
  }
  p.note = change + ": per-rank batch " + std::to_string(batch_size) + " -> " + std::to_string(p.batch_size) +
           ", --grad-accum " + std::to_string(grad_accum) + " -> " + std::to_string(p.grad_accum) +
           ", global batch " + std::to_string(global) + " kept (--elastic-batch global)";
  return p;
}

void apply_elastic_batch(TrainConfig& c) {
  if (c.mode != Mode::ddp) return;
  ElasticBatch policy = c.elastic_batch;
  if (policy == ElasticBatch::automatic) {
    const char* elastic = std::getenv("TANDEM_ELASTIC");
    policy = elastic && std::string(elastic) == "1" ? ElasticBatch::global : ElasticBatch::off;
  }
  const std::string from = resolve_resume(c.resume, c.checkpoint_dir);
  if (from.empty()) return;
  const CheckpointMeta m = read_checkpoint_meta(from);
  const int64_t world = read_launch_env().world_size;
  const ElasticBatchPlan p = plan_elastic_batch(policy, m, c.batch_size, c.grad_accum, c.lr, world);
  if (!p.note.empty()) spdlog::info("{}", p.note);
  c.batch_size = p.batch_size;
  c.grad_accum = p.grad_accum;
  c.lr = p.lr;
  c.elastic_base_world = p.base_world;
}

}  // namespace tandem
