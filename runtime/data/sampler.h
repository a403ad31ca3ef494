// DistributedSampler: which dataset indices one replica visits in one epoch, in order.
// Invariant (docs/reference.md, "Data order"): the epoch's order is a permutation of [0, size) that
// depends only on (seed, epoch); it is padded by wrapping around its start up to a multiple of
// R, and replica r of R takes positions r, r+R, r+2R, ... (as PyTorch's DistributedSampler).
// So the R replicas' lists interleave back into the single-process (R = 1) order exactly.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct SamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;      // this replica, in [0, num_replicas)
  bool shuffle = true;   // false: identity order (evaluation)
  uint64_t seed = 0;
  // true: pad to a multiple of num_replicas by wrapping, so every replica has the same count
  // (training: steps line up). false: no padding, replicas differ by at most one sample and
  // every sample is visited exactly once (distributed evaluation whose counts are summed).
  bool pad = true;
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, SamplerOptions options = {});

  // Selects the epoch (recomputes the order); a new sampler starts at epoch 0.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This replica's dataset indices for the current epoch, in visiting order.
  const std::vector<int64_t>& indices() const { return indices_; }
  // indices().size(): ceil(size / R) with padding; floor or ceil of size / R without.
  int64_t num_samples() const { return static_cast<int64_t>(indices_.size()); }
  // num_samples() * R with padding, dataset_size() without.
  int64_t total_size() const;

  int64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return options_; }

  // The unpadded order of [0, size) for an epoch: a seeded Fisher-Yates shuffle, or the
  // identity when !shuffle. Pure function of (size, seed, epoch).
  static std::vector<int64_t> permutation(int64_t size, uint64_t seed, int64_t epoch, bool shuffle);

 private:
  int64_t size_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace tandem
