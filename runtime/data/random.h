// Portable, seeded random numbers for the data layer (synthetic data, sampler shuffles).
// Invariant: every value depends only on the seed and plain 64-bit integer arithmetic, so the
// same seed gives the same bytes and the same permutation on any machine and compiler
// (std::*_distribution are implementation-defined, so they are never used here).
#pragma once

#include <cstdint>

namespace tandem::data_random {

// splitmix64's finaliser: a bijective 64-bit mix (Steele, Lea, Flood 2014).
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hash of an ordered pair: distinct (a, b) give well-separated streams.
inline uint64_t hash2(uint64_t a, uint64_t b) {
  return mix64(mix64(a) ^ (b * 0xd1b54a32d192ed03ULL));
}

// A splitmix64 stream.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n >= 1, without modulo bias (rejection of the short last range).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // a multiple of n
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }

 private:
  uint64_t state_;
};

}  // namespace tandem::data_random
