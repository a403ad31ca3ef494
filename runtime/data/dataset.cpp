// Fashion-MNIST loading (two IDX files, cross-checked) and the seeded synthetic dataset.
// Invariant: a returned Dataset passes Dataset::check(); every rejection names the files and
// the disagreement. Synthetic bytes come only from data_random (portable integer hashing).
#include "runtime/data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "runtime/data/idx.h"
#include "runtime/data/random.h"
#include "runtime/tensor.h"

namespace tandem {

void Dataset::check() const {
  auto bad = [&](const std::string& what) {
    throw std::logic_error("dataset '" + name + "': " + what);
  };
  if (size < 0 || channels <= 0 || height <= 0 || width <= 0 || classes <= 0)
    bad("bad sizes: size " + std::to_string(size) + ", sample " + std::to_string(channels) + "x" +
        std::to_string(height) + "x" + std::to_string(width) + ", " + std::to_string(classes) +
        " classes");
  if (static_cast<int64_t>(pixels.size()) != size * sample_numel())
    bad(std::to_string(pixels.size()) + " pixel bytes for " + std::to_string(size) +
        " samples of " + std::to_string(sample_numel()));
  if (static_cast<int64_t>(labels.size()) != size)
    bad(std::to_string(labels.size()) + " labels for " + std::to_string(size) + " samples");
  for (int64_t i = 0; i < size; ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      bad("label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) +
          " is outside [0, " + std::to_string(classes) + ")");
  if (!(std > 0.0f)) bad("normalisation std must be positive");
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw std::runtime_error("Fashion-MNIST directory '" + dir +
                             "' does not exist: install the Debian package dataset-fashion-mnist "
                             "(it provides " + std::string(kFashionMnistDefaultDir) +
                             ") or pass --data-dir DIR");
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("Fashion-MNIST directory '" + dir + "' is not a directory");

  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = (fs::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (fs::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
  for (const std::string& path : {images_path, labels_path})
    if (!fs::exists(path, ec))
      throw std::runtime_error("Fashion-MNIST file '" + path + "' does not exist (the directory '" +
                               dir + "' should hold the gzip IDX files of dataset-fashion-mnist: " +
                               prefix + "-images-idx3-ubyte.gz and " + prefix +
                               "-labels-idx1-ubyte.gz)");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);

  if (images.dims.size() != 3)
    throw std::runtime_error("IDX file '" + images_path + "': images must be 3-D (count, rows, "
                             "columns), the header says " + shape_str(images.dims));
  if (labels.dims.size() != 1)
    throw std::runtime_error("IDX file '" + labels_path + "': labels must be 1-D (count), the "
                             "header says " + shape_str(labels.dims));
  if (images.dims[0] != labels.dims[0])
    throw std::runtime_error("image and label counts disagree: '" + images_path + "' holds " +
                             std::to_string(images.dims[0]) + " images, '" + labels_path +
                             "' holds " + std::to_string(labels.dims[0]) + " labels");

  Dataset ds;
  ds.name = std::string("fashion-mnist/") + (train ? "train" : "test");
  ds.size = images.dims[0];
  ds.channels = 1;
  ds.height = images.dims[1];
  ds.width = images.dims[2];
  ds.classes = 10;
  ds.mean = kFashionMnistMean;
  ds.std = kFashionMnistStd;
  ds.pixels = std::move(images.data);
  ds.labels.resize(static_cast<size_t>(ds.size));
  for (int64_t i = 0; i < ds.size; ++i) {
    uint8_t v = labels.data[static_cast<size_t>(i)];
    if (v >= ds.classes)
      throw std::runtime_error("IDX file '" + labels_path + "': label " + std::to_string(v) +
                               " at index " + std::to_string(i) + " is outside 0.." +
                               std::to_string(ds.classes - 1));
    ds.labels[static_cast<size_t>(i)] = v;
  }
  ds.check();
  return ds;
}

Dataset make_synthetic(int64_t size, uint64_t seed, bool train) {
  using data_random::hash2;
  using data_random::SplitMix64;
  if (size < 0)
    throw std::invalid_argument("make_synthetic: negative size " + std::to_string(size));

  Dataset ds;
  ds.name = std::string("synthetic/") + (train ? "train" : "test");
  ds.size = size;
  ds.channels = 1;
  ds.height = 28;
  ds.width = 28;
  ds.classes = 10;
  // Prototypes are uniform on [0, 1] and the triangular noise below has std ~ 52/255; after
  // clamping, pixels measure mean 0.507, std 0.316 (seed 1, 2000 samples).
  ds.mean = 0.5f;
  ds.std = 0.32f;
  const int64_t numel = ds.sample_numel();

  // Prototypes come from stream 0 of the seed, so train (stream 1) and test (stream 2) share them.
  std::vector<uint8_t> prototypes(static_cast<size_t>(ds.classes * numel));
  SplitMix64 proto_rng(hash2(seed, 0));
  for (auto& p : prototypes) p = static_cast<uint8_t>(proto_rng.next() >> 56);

  // Each sample has its own counter-based stream, so sample i does not depend on `size`.
  const uint64_t stream = hash2(seed, train ? 1 : 2);
  ds.pixels.resize(static_cast<size_t>(size * numel));
  ds.labels.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    SplitMix64 rng(hash2(stream, static_cast<uint64_t>(i)));
    const int32_t label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(ds.classes)));
    ds.labels[static_cast<size_t>(i)] = label;
    const uint8_t* proto = prototypes.data() + label * numel;
    uint8_t* out = ds.pixels.data() + i * numel;
    uint64_t bits = 0;
    for (int64_t k = 0; k < numel; ++k) {
      if ((k & 3) == 0) bits = rng.next();  // 16 random bits per pixel
      const int a = static_cast<int>(bits & 0xFF), b = static_cast<int>((bits >> 8) & 0xFF);
      bits >>= 16;
      const int noise = (a + b - 255) / 2;  // triangular on [-127, 127]
      out[k] = static_cast<uint8_t>(std::clamp(int{proto[k]} + noise, 0, 255));
    }
  }
  ds.check();
  return ds;
}

}  // namespace tandem
