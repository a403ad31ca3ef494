// What tandem-train builds before its loop, from the typed TrainConfig: the data, the
// device, and the public API's configuration structs (ModelConfig, OptimizerConfig,
// ParallelOptions), so that the trainer itself (train/trainer.cpp) reads as a loop.
#pragma once

#include <memory>
#include <string>

#include "train/train_config.h"
#include "zoo/zoo.h"
#include "runtime/data/dataset.h"
#include "runtime/data/text.h"
#include "runtime/optim/optimizer.h"
#include "runtime/strategy/parallel.h"

namespace tandem {

struct TrainData {
  std::shared_ptr<const Dataset> train, test;  // images
  std::shared_ptr<const TextDataset> text;     // --data shakespeare | text:PATH
  int64_t train_size() const { return text ? text->train_tokens : train->size; }
};

// Loads --data. A text file that cannot serve is a UsageError naming it.
TrainData load_train_data(const TrainConfig& c);
// --device cuda: single and dp start at GPU 0; a DDP rank takes the GPU of its LOCAL_RANK
// (modulo the visible GPUs for the host-staged backends). Selects that GPU.
Device resolve_device(const TrainConfig& c);
ModelConfig model_config(const TrainConfig& c, const TrainData& data);
OptimizerConfig optimizer_config(const TrainConfig& c);
// Every ParallelOptions field the flags set (not the group, which needs the rank first).
ParallelOptions parallel_options(const TrainConfig& c, Device device, int threads);
// Which bf16 GEMM runs under --precision bf16 ("native", "fallback", "cublas"); "" under fp32.
std::string bf16_gemm_name(const TrainConfig& c, Device device);
// Sets the fp32 matrix products' math on every CUDA device this process drives (dp: all
// --devices): TF32 tensor-op math under --tf32, else strict fp32. Returns what they run
// as: "tf32", or "fp32" (strict; the CPU's only mode, and a device without TF32).
std::string apply_fp32_math(const TrainConfig& c, Device device);
// --sample N: prints N characters sampled from --resume's checkpoint (model and vocabulary
// from the checkpoint, not from the flags).
void run_sampling(const TrainConfig& c, Device device);

}  // namespace tandem
