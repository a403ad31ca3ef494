// DistributedSampler: seeded Fisher-Yates per epoch, wrap padding, strided sharding.
// Invariant: indices() is exactly positions rank, rank+R, ... of the (padded) epoch order.
#include "runtime/data/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/data/random.h"

namespace tandem {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), options_(options) {
  if (dataset_size < 0)
    throw std::invalid_argument("DistributedSampler: negative dataset size " +
                                std::to_string(dataset_size));
  if (options.num_replicas < 1)
    throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1, got " +
                                std::to_string(options.num_replicas));
  if (options.rank < 0 || options.rank >= options.num_replicas)
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(options.rank) +
                                " is outside [0, " + std::to_string(options.num_replicas) + ")");
  set_epoch(0);
}

int64_t DistributedSampler::total_size() const {
  if (!options_.pad) return size_;
  const int64_t R = options_.num_replicas;
  return (size_ + R - 1) / R * R;
}

std::vector<int64_t> DistributedSampler::permutation(int64_t size, uint64_t seed, int64_t epoch,
                                                     bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  data_random::SplitMix64 rng(data_random::hash2(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch < 0)
    throw std::invalid_argument("DistributedSampler: negative epoch " + std::to_string(epoch));
  epoch_ = epoch;
  indices_.clear();
  if (size_ == 0) return;
  const std::vector<int64_t> order = permutation(size_, options_.seed, epoch, options_.shuffle);
  const int64_t total = total_size();
  const int64_t R = options_.num_replicas;
  indices_.reserve(static_cast<size_t>((total + R - 1) / R));
  // Padded position p holds order[p % size]: wrapping around (repeatedly if size < R).
  for (int64_t p = options_.rank; p < total; p += R)
    indices_.push_back(order[static_cast<size_t>(p % size_)]);
}

}  // namespace tandem
