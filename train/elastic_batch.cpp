// The batch and learning rate across a change of world size (see header).
#include "train/elastic_batch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "collectives/init.h"
#include "runtime/checkpoint/checkpoint.h"

namespace tandem {
namespace {

int64_t base_world_of(const CheckpointMeta& m, int64_t world) {
  if (auto it = m.extra.find(kBaseWorldKey); it != m.extra.end()) {
    size_t used = 0;
    int64_t base = 0;
    try {
      base = std::stoll(it->second, &used);
    } catch (const std::exception&) {
    }
    if (used != it->second.size() || base < 1)
      throw std::runtime_error("the checkpoint's " + std::string(kBaseWorldKey) + " '" + it->second +
                               "' is not a positive number");
    return base;
  }
  // Written before the key existed: its own world size is the best guess.
  return m.replicas > 0 ? m.replicas : world;
}

// Why no (per-rank batch, --grad-accum) keeps `global` at `world`, and what would.
std::string refusal(const std::string& change, int64_t global, int64_t world, const BatchSettings& flags) {
  std::string what = change + ": the checkpoint's global batch " + std::to_string(global) +
                     " is not a whole number of per-rank batches at world size " + std::to_string(world) + " (";
  if (global % world != 0) {
    int64_t below = world - 1, above = world + 1;
    while (below > 1 && global % below != 0) --below;
    while (above < global && global % above != 0) ++above;
    what += std::to_string(global) + " is not a multiple of " + std::to_string(world) +
            ", so no --batch-size or --grad-accum keeps it at this size). Resume at a world size that divides " +
            std::to_string(global) + " (the nearest: " + std::to_string(below) +
            (above <= global ? " and " + std::to_string(above) : std::string()) + ")";
  } else {
    what += "neither " + std::to_string(global) + " / (" + std::to_string(world) + " x --grad-accum " +
            std::to_string(flags.grad_accum) + ") nor " + std::to_string(global) + " / (" + std::to_string(world) +
            " x --batch-size " + std::to_string(flags.batch_size) + ") is whole). Pass a --grad-accum that divides " +
            std::to_string(global / world) + ", the samples of each rank per step";
  }
  return what + ", or --elastic-batch per-rank to keep --batch-size " + std::to_string(flags.batch_size) +
         " and scale the learning rate";
}

}  // namespace

ElasticBatchPlan plan_elastic_batch(ElasticBatch policy, const CheckpointMeta& m, const BatchSettings& flags,
                                    int64_t world) {
  ElasticBatchPlan p{flags, base_world_of(m, world), ""};
  if (policy == ElasticBatch::off || m.replicas < 1 || m.batch_size < 1) return p;
  const std::string change = "world size " + std::to_string(m.replicas) + " -> " + std::to_string(world);
  if (policy == ElasticBatch::per_rank) {
    if (world == p.base_world && world == m.replicas) return p;
    // lr x world / base, in double, rounded once to the schedule's float.
    const auto scaled = [&](float rate) {
      return static_cast<float>(static_cast<double>(rate) * static_cast<double>(world) /
                                static_cast<double>(p.base_world));
    };
    p.settings.lr = scaled(flags.lr);
    p.settings.min_lr = scaled(flags.min_lr);
    p.note = fmt::format("{}: per-rank batch {} kept, global batch {}, learning rate {} x {}/{} = {}{} (the job first "
                         "ran at world size {}; --elastic-batch per-rank)",
                         change, flags.batch_size, flags.batch_size * world * flags.grad_accum, flags.lr, world,
                         p.base_world, p.settings.lr,
                         flags.min_lr > 0 ? fmt::format(", --min-lr {} -> {}", flags.min_lr, p.settings.min_lr) : "",
                         p.base_world);
    return p;
  }
  // global: the checkpoint's, kept even at its own world size, where the flags may differ
  // from what an earlier change made of them.
  const int64_t global = m.batch_size * m.replicas * std::max<int64_t>(1, m.grad_accum);
  if (flags.batch_size * world * flags.grad_accum == global) return p;
  if (global % (world * flags.grad_accum) == 0) {
    p.settings.batch_size = global / (world * flags.grad_accum);
  } else if (global % (world * flags.batch_size) == 0) {
    p.settings.grad_accum = global / (world * flags.batch_size);
  } else {
    throw std::runtime_error(refusal(change, global, world, flags));
  }
  p.note = fmt::format("{}: per-rank batch {} -> {}, --grad-accum {} -> {}, global batch {} kept, learning rate {} "
                       "unchanged (--elastic-batch global)",
                       change, flags.batch_size, p.settings.batch_size, flags.grad_accum, p.settings.grad_accum, global,
                       flags.lr);
  return p;
}

const char* elastic_batch_str(ElasticBatch policy) {
  switch (policy) {
    case ElasticBatch::global:
      return "global";
    case ElasticBatch::per_rank:
      return "per-rank";
    case ElasticBatch::off:
      return "off";
    case ElasticBatch::automatic:
      break;
  }
  return "auto";
}

void apply_elastic_batch(TrainConfig& c) {
  if (c.mode != Mode::ddp) {
    c.elastic_batch = ElasticBatch::off;
    return;
  }
  if (c.elastic_batch == ElasticBatch::automatic) {
    const char* elastic = std::getenv("TANDEM_ELASTIC");
    c.elastic_batch = elastic && std::string(elastic) == "1" ? ElasticBatch::global : ElasticBatch::off;
  }
  const std::string from = resolve_resume(c.resume, c.checkpoint_dir);
  if (from.empty()) return;  // a fresh job: its own world size is the base (Trainer::save)
  const CheckpointMeta m = read_checkpoint_meta(from);
  const LaunchEnv env = read_launch_env();
  const ElasticBatchPlan p =
      plan_elastic_batch(c.elastic_batch, m, {c.batch_size, c.grad_accum, c.lr, c.min_lr}, env.world_size);
  if (!p.note.empty() && env.rank == 0) spdlog::info("{}", p.note);
  c.batch_size = p.settings.batch_size;
  c.grad_accum = p.settings.grad_accum;
  c.lr = p.settings.lr;
  c.min_lr = p.settings.min_lr;
  c.elastic_base_world = p.base_world;
}

}  // namespace tandem
