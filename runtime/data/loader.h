// DataLoader: cuts one replica's epoch order (a DistributedSampler) into batches of normalised
// CPU tensors; callers move them to their device.
// Invariant: batch (epoch, step) holds exactly sampler positions [step*b, step*b + b) of that
// epoch, whatever was loaded before, so seek() resumes a run's data order exactly and the R
// replicas' batches at step i interleave into the single-process batch i of size R*b (replica
// r's j-th sample sits at position r + R*j of it) whenever the dataset needs no padding.
//
// drop_last = true (training): a short final batch is dropped, so every step has the full
// batch and all replicas take the same number of steps. drop_last = false (evaluation): the
// final batch is smaller. Assembling a batch converts and normalises 8 pixels per vector
// instruction (0.8 ms for 1024 Fashion-MNIST images in tandem-train's "load batch" span);
// PrefetchingSource (prefetch.h) does it on a thread during the step, for a GPU's sake.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tandem/runtime/data/dataset.h"
#include "tandem/runtime/data/sampler.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// One batch of B samples. The built-in loaders' models map `inputs` to logits with one row
// per label: an image classifier (B, C, H, W) f32 -> (B, classes), a language model's tokens
// (B, T) i32 -> (B*T, vocab) against labels (B*T), the next token at each position. A batch
// source of your own may carry any targets its loss reads (runtime/layers/loss.h): class
// indices (i32) or f32 tensors of any shape in `labels`, and more in `extra_targets`
// (multi-task). A strategy cuts every input and target along dimension 0 when it splits a
// batch (DataParallel), so each holds one row per sample or per output row.
struct Batch {
  Tensor inputs;                 // (B, ...) CPU: normalised f32 images or i32 tokens
  Tensor labels;                 // target 0: (rows) i32 for the built-in loaders, B for images, B*T for tokens
  std::vector<Tensor> extra_targets;  // targets 1, 2, ...: a loss's further targets (may be empty)
  std::vector<int64_t> indices;  // (B) dataset index (or window start) of each sample, in batch order
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
  // Every target (labels, then extra_targets) on `device`, as a loss reads them.
  std::vector<Tensor> targets_on(Device device) const {
    std::vector<Tensor> out;
    out.reserve(1 + extra_targets.size());
    out.push_back(labels.defined() ? labels.on(device) : labels);
    for (const Tensor& t : extra_targets) out.push_back(t.defined() ? t.on(device) : t);
    return out;
  }
};

// Where a loader stands: the batch next() will return. Saved in checkpoints.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  bool operator==(const LoaderPosition&) const = default;
};

// Where a training or evaluation loop gets its batches: DataLoader (images, a sampler's
// epoch order) and TextLoader (runtime/data/text.h, random windows). Invariant for both:
// the batch at a position is a pure function of (seed, position, replica), so seek()
// resumes a run exactly and replica r of R draws the r-th contiguous share of what one
// process with R times the batch draws.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t batch_size() const = 0;  // samples per batch and replica
  virtual int64_t replicas() const = 0;    // how many replicas share each global batch
  // Full batches per epoch for this replica (the same for every replica).
  virtual int64_t steps_per_epoch() const = 0;
  // Makes (epoch, step_in_epoch) the next batch; step_in_epoch == steps_per_epoch() means
  // that epoch is finished. Throws std::out_of_range for a step outside [0, steps_per_epoch()].
  virtual void seek(LoaderPosition position) = 0;
  void set_epoch(int64_t epoch) { seek({epoch, 0}); }
  virtual LoaderPosition position() const = 0;
  // The position after `global_step` batches counted from epoch 0, step 0.
  LoaderPosition position_of(int64_t global_step) const;
  // The next batch of the current epoch and advances, or nullopt once the epoch is done
  // (then set_epoch(epoch + 1) starts the next one).
  virtual std::optional<Batch> next() = 0;
};

// Gathers `indices` of `dataset` into a batch, normalising (p/255 - mean) / std through a
// 256-entry table. Throws std::out_of_range for an index outside the dataset.
Batch make_batch(const Dataset& dataset, std::span<const int64_t> indices);

class DataLoader final : public BatchSource {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, int64_t batch_size,
             bool drop_last);

  int64_t batch_size() const override { return batch_size_; }
  int64_t replicas() const override { return sampler_.options().num_replicas; }
  bool drop_last() const { return drop_last_; }
  // Batches per epoch for this replica (the same for every replica when the sampler pads).
  int64_t steps_per_epoch() const override;
  void seek(LoaderPosition position) override;
  LoaderPosition position() const override { return {sampler_.epoch(), step_}; }
  std::optional<Batch> next() override;
  // Batch `step` of the current epoch, without moving the position.
  Batch batch_at(int64_t step) const;

  const Dataset& dataset() const { return *dataset_; }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  int64_t batch_size_;
  bool drop_last_;
  int64_t step_ = 0;
};

}  // namespace tandem
