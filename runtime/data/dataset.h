// Image classification datasets held in memory as bytes: Fashion-MNIST from its gzip IDX
// files, and a seeded synthetic stand-in with the same shape.
// Invariant: pixels.size() == size*channels*height*width, labels.size() == size, and every
// label is in [0, classes). Pixels stay uint8 (4x less memory); the loader normalises them at
// batch time as (p/255 - mean) / std.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Where Debian's dataset-fashion-mnist package installs the files (the --data-dir default).
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// Per-pixel statistics of the Fashion-MNIST training set, on the [0, 1] scale.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

struct Dataset {
  std::string name;          // "fashion-mnist/train", "synthetic/test", ...
  int64_t size = 0;          // number of samples
  int64_t channels = 0, height = 0, width = 0;
  int64_t classes = 0;
  std::vector<uint8_t> pixels;  // (size, channels, height, width)
  std::vector<int32_t> labels;  // (size)
  float mean = 0.0f, std = 1.0f;  // normalisation, on the [0, 1] pixel scale

  int64_t sample_numel() const { return channels * height * width; }
  const uint8_t* sample(int64_t i) const { return pixels.data() + i * sample_numel(); }
  // Throws std::logic_error when the struct invariant above does not hold.
  void check() const;
};

// Reads train-{images-idx3,labels-idx1}-ubyte.gz (or t10k-... when !train) from `dir`.
// Throws std::runtime_error naming the directory/file and the problem (missing directory,
// malformed IDX, image/label count mismatch, wrong rank, label out of range).
Dataset load_fashion_mnist(const std::string& dir, bool train);

// A learnable 10-class 1x28x28 dataset: one random prototype image per class (from `seed`),
// each sample its class's prototype plus seeded noise. Train and test share the prototypes and
// draw different samples, so what is learnt on one generalises to the other. The same
// (size, seed, train) gives identical bytes on any machine.
Dataset make_synthetic(int64_t size, uint64_t seed, bool train);

}  // namespace tandem
