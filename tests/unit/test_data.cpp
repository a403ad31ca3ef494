// Data layer tests: IDX reading and its error messages (on small files written here with zlib),
// Fashion-MNIST loading (skipped when the Debian package is absent), synthetic determinism,
// the sampler's permutation/sharding/padding, and the loader's batches and exact resume.
// The key invariant (docs/reference.md, "Data order"): replica r's j-th sample at step i is the single-process
// batch i's sample at position r + R*j, for R = 2, 3, 4.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "runtime/data/dataset.h"
#include "runtime/data/idx.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// A fresh directory for this test's files, removed with everything in it.
struct TempDir : tandem::testing::TempDir {
  TempDir() : tandem::testing::TempDir("tandem_test_data") {}
};

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// mode "wb" writes gzip, "wT" a plain file (zlib's transparent write).
void write_gz(const std::string& path, const std::vector<uint8_t>& bytes, const char* mode = "wb") {
  gzFile f = gzopen(path.c_str(), mode);
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// Runs fn, which must throw a std::runtime_error whose what() holds every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    for (const auto& part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "message lacks \"" << part << "\": " << what;
    return;
  }
  ADD_FAILURE() << "expected a std::runtime_error mentioning \"" << parts.at(0) << "\"";
}

// read_idx(path) must fail with a message naming `path` and holding every one of `parts`.
void expect_idx_error(const std::string& path, std::vector<std::string> parts) {
  parts.insert(parts.begin(), "IDX file '" + path + "'");
  expect_error([&] { read_idx(path); }, parts);
}

// ---- IDX --------------------------------------------------------------------------------

TEST(Idx, ReadsGzipAndPlainFiles) {
  TempDir dir;
  const auto data = ramp(2 * 3 * 4);
  write_gz(dir.file("a.gz"), idx_bytes(0x08, {2, 3, 4}, data));
  write_gz(dir.file("a.idx"), idx_bytes(0x08, {2, 3, 4}, data), "wT");
  ASSERT_EQ(fs::file_size(dir.file("a.idx")), 16u + data.size());  // really uncompressed
  for (const auto& name : {"a.gz", "a.idx"}) {
    IdxArray a = read_idx(dir.file(name));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4})) << name;
    EXPECT_EQ(a.data, data) << name;
    EXPECT_EQ(a.path, dir.file(name));
  }
}

TEST(Idx, WrongMagicAndUnsupportedType) {
  TempDir dir;
  auto bytes = idx_bytes(0x08, {4}, ramp(4));
  bytes[0] = 0x12;
  bytes[1] = 0x34;
  write_gz(dir.file("bad.gz"), bytes);
  expect_idx_error(dir.file("bad.gz"), {"wrong magic number 0x12340801", "expected 0x000008NN"});
  write_gz(dir.file("f.gz"), idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
  expect_idx_error(dir.file("f.gz"), {"data type 0x0D (float32)", "only type 0x08"});
}

TEST(Idx, SizeMismatches) {
  TempDir dir;
  write_gz(dir.file("t.gz"), idx_bytes(0x08, {2, 3, 3}, ramp(10)));
  expect_idx_error(dir.file("t.gz"), {"truncated data", "need 18 bytes", "got 10"});
  write_gz(dir.file("h2.gz"), {0x00, 0x00});
  expect_idx_error(dir.file("h2.gz"), {"truncated header", "holds 2 bytes"});
  // The magic says 3 dimensions (16 header bytes); only one and a half are there.
  write_gz(dir.file("h10.gz"), {0x00, 0x00, 0x08, 0x03, 0, 0, 0, 5, 0, 0});
  expect_idx_error(dir.file("h10.gz"), {"truncated header", "need 16", "after 10"});
  write_gz(dir.file("empty.gz"), {});
  expect_idx_error(dir.file("empty.gz"), {"truncated header", "holds 0 bytes"});
  // Trailing bytes are an error too: the header does not describe the file.
  write_gz(dir.file("x.gz"), idx_bytes(0x08, {2, 2}, ramp(7)));
  expect_idx_error(dir.file("x.gz"), {"3 trailing bytes", "4 bytes of data"});
}

TEST(Idx, CutGzipStreamIsReportedAsTruncated) {
  TempDir dir;
  // Incompressible data, so cutting the compressed file cuts the IDX data.
  std::vector<uint8_t> noise(4096);
  uint32_t x = 12345;
  for (auto& b : noise) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  write_gz(dir.file("cut.gz"), idx_bytes(0x08, {4096}, noise));
  fs::resize_file(dir.file("cut.gz"), fs::file_size(dir.file("cut.gz")) / 2);
  expect_idx_error(dir.file("cut.gz"),
                   {"truncated data", "need 4096 bytes", "gzip stream itself ends early"});
}

TEST(Idx, MissingFileAndDirectory) {
  TempDir dir;
  expect_idx_error(dir.file("nope.gz"), {"no such file"});
  expect_idx_error(dir.path().string(), {"is a directory"});
}

// ---- Fashion-MNIST loading from small fake files -------------------------------------------

// Writes a fake Fashion-MNIST split with n_images 4x5 images and n_labels labels.
void write_fake_split(const TempDir& dir, const std::string& prefix, uint32_t n_images,
                      uint32_t n_labels, uint8_t bad_label = 0) {
  write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"),
           idx_bytes(0x08, {n_images, 4, 5}, ramp(size_t{n_images} * 20)));
  std::vector<uint8_t> labels(n_labels);
  for (uint32_t i = 0; i < n_labels; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  if (bad_label && n_labels > 2) labels[2] = bad_label;
  write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes(0x08, {n_labels}, labels));
}

void expect_load_error(const fs::path& dir, bool train, const std::vector<std::string>& parts) {
  expect_error([&] { load_fashion_mnist(dir.string(), train); }, parts);
}

TEST(FashionMnist, LoadsSmallFakeFiles) {
  TempDir dir;
  write_fake_split(dir, "train", 12, 12);
  write_fake_split(dir, "t10k", 3, 3);
  Dataset train = load_fashion_mnist(dir.path().string(), true);
  EXPECT_EQ((std::vector<int64_t>{train.size, train.channels, train.height, train.width}),
            (std::vector<int64_t>{12, 1, 4, 5}));
  EXPECT_EQ(train.classes, 10);
  EXPECT_EQ(train.pixels, ramp(12 * 20));
  EXPECT_EQ(train.labels[11], 1);
  EXPECT_FLOAT_EQ(train.mean, 0.2860f);
  EXPECT_FLOAT_EQ(train.std, 0.3530f);
  EXPECT_EQ(load_fashion_mnist(dir.path().string(), false).size, 3);
}

TEST(FashionMnist, CountMismatchNamesBothFilesAndCounts) {
  TempDir dir;
  write_fake_split(dir, "train", 5, 4);
  expect_load_error(dir.path(), true,
                    {dir.file("train-images-idx3-ubyte.gz"), dir.file("train-labels-idx1-ubyte.gz"),
                     "5 images", "4 labels"});
}

TEST(FashionMnist, WrongRanksAndLabelValues) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x08, {3, 20}, ramp(60)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x08, {3}, {1, 2, 3}));
  expect_load_error(dir.path(), true, {dir.file("train-images-idx3-ubyte.gz"), "3-D", "[3, 20]"});
  write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes(0x08, {3, 4, 5}, ramp(60)));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes(0x08, {3, 1}, {1, 2, 3}));
  expect_load_error(dir.path(), false, {dir.file("t10k-labels-idx1-ubyte.gz"), "1-D", "[3, 1]"});

  TempDir dir2;
  write_fake_split(dir2, "train", 4, 4, /*bad_label=*/10);
  expect_load_error(dir2.path(), true,
                    {dir2.file("train-labels-idx1-ubyte.gz"), "label 10", "index 2", "0..9"});
}

TEST(FashionMnist, MissingDirectoryAndMissingFile) {
  TempDir dir;
  const fs::path gone = dir.path() / "no-such-dir";
  expect_load_error(gone, true,
                    {gone.string(), "does not exist", "dataset-fashion-mnist", "--data-dir"});
  write_fake_split(dir, "train", 2, 2);
  fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
  expect_load_error(dir.path(), true, {dir.file("train-labels-idx1-ubyte.gz"), "does not exist",
                                       "dataset-fashion-mnist"});
}

TEST(FashionMnist, RealDataset) {
  if (!fs::exists(kFashionMnistDefaultDir))
    GTEST_SKIP() << kFashionMnistDefaultDir
                 << " is absent (install the Debian package dataset-fashion-mnist)";
  Dataset train = load_fashion_mnist(kFashionMnistDefaultDir, true);
  Dataset test = load_fashion_mnist(kFashionMnistDefaultDir, false);
  EXPECT_EQ(train.size, 60000);
  EXPECT_EQ(test.size, 10000);
  for (const Dataset* ds : {&train, &test}) {
    EXPECT_EQ((std::vector<int64_t>{ds->channels, ds->height, ds->width}),
              (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ(ds->pixels.size(), static_cast<size_t>(ds->size * 28 * 28));
    std::set<int32_t> seen(ds->labels.begin(), ds->labels.end());
    EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  EXPECT_EQ(train.labels[0], 9);  // an ankle boot
  // The stated mean matches the data (to the 4 digits it is given with).
  double sum = 0;
  for (uint8_t p : train.pixels) sum += p;
  EXPECT_NEAR(sum / 255.0 / static_cast<double>(train.pixels.size()), kFashionMnistMean, 1e-4);
}

// ---- synthetic data -----------------------------------------------------------------------

TEST(Synthetic, DeterministicAndSeedDependent) {
  Dataset a = make_synthetic(300, 7, true), b = make_synthetic(300, 7, true);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.size, 300);
  EXPECT_EQ(a.channels * a.height * a.width, 784);
  EXPECT_NE(make_synthetic(300, 8, true).pixels, a.pixels);
  EXPECT_NE(make_synthetic(300, 7, false).pixels, a.pixels);
  // Sample i does not depend on how many are made.
  Dataset small = make_synthetic(10, 7, true);
  EXPECT_TRUE(std::equal(small.pixels.begin(), small.pixels.end(), a.pixels.begin()));
  EXPECT_EQ(std::set<int32_t>(a.labels.begin(), a.labels.end()).size(), 10u);
}

TEST(Synthetic, PinnedBytes) {
  // Portable generation: these values must be the same on every machine and compiler. If the
  // generator changes on purpose, update them (and note that old runs are not reproducible).
  Dataset d = make_synthetic(64, 1234, true);
  uint64_t fnv1a = 0xcbf29ce484222325ULL;
  for (uint8_t p : d.pixels) fnv1a = (fnv1a ^ p) * 0x100000001b3ULL;
  EXPECT_EQ(fnv1a, 0xfac257f05f191f33ULL);
  EXPECT_EQ((std::vector<int32_t>(d.labels.begin(), d.labels.begin() + 8)),
            (std::vector<int32_t>{7, 7, 3, 0, 4, 0, 4, 5}));
}

TEST(Synthetic, LearnableAndGeneralises) {
  // A nearest-class-mean classifier fitted on train must do well on test.
  Dataset train = make_synthetic(2000, 3, true), test = make_synthetic(500, 3, false);
  const int64_t n = train.sample_numel();
  std::vector<double> sums(10 * n, 0.0), counts(10, 0.0);
  for (int64_t i = 0; i < train.size; ++i) {
    counts[train.labels[i]] += 1;
    for (int64_t k = 0; k < n; ++k) sums[train.labels[i] * n + k] += train.sample(i)[k];
  }
  int correct = 0;
  for (int64_t i = 0; i < test.size; ++i) {
    std::vector<double> dist(10, 0.0);
    for (int c = 0; c < 10; ++c)
      for (int64_t k = 0; k < n; ++k)
        dist[c] += std::pow(test.sample(i)[k] - sums[c * n + k] / counts[c], 2);
    correct += std::min_element(dist.begin(), dist.end()) - dist.begin() == test.labels[i];
  }
  EXPECT_GT(correct, 450) << "nearest-class-mean accuracy " << correct << "/500";
}

// ---- sampler --------------------------------------------------------------------------------

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), int64_t{0});
  return v == expected;
}

TEST(Sampler, PermutationPerEpochAndSeed) {
  auto p0 = DistributedSampler::permutation(1000, 42, 0, true);
  auto p1 = DistributedSampler::permutation(1000, 42, 1, true);
  EXPECT_TRUE(is_permutation_of_range(p0, 1000));
  EXPECT_TRUE(is_permutation_of_range(p1, 1000));
  EXPECT_NE(p0, p1);
  EXPECT_EQ(p0, DistributedSampler::permutation(1000, 42, 0, true));
  EXPECT_NE(p0, DistributedSampler::permutation(1000, 43, 0, true));
  EXPECT_EQ(DistributedSampler::permutation(5, 42, 3, false),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));

  DistributedSampler s(1000, {.seed = 42});
  EXPECT_EQ(s.indices(), p0);
  s.set_epoch(1);
  EXPECT_EQ(s.indices(), p1);
  EXPECT_EQ(s.epoch(), 1);
}

TEST(Sampler, ShardsAreDisjointAndCover) {
  for (int64_t R : {2, 3, 4}) {
    const int64_t n = 120;
    std::vector<int64_t> all;
    for (int64_t r = 0; r < R; ++r) {
      DistributedSampler s(n, {.num_replicas = R, .rank = r, .seed = 5});
      s.set_epoch(2);
      EXPECT_EQ(s.num_samples(), n / R);
      all.insert(all.end(), s.indices().begin(), s.indices().end());
    }
    EXPECT_TRUE(is_permutation_of_range(all, n)) << "R=" << R;
  }
}

TEST(Sampler, PaddingWrapsToEqualCounts) {
  const auto order = DistributedSampler::permutation(10, 9, 0, true);
  std::vector<int64_t> padded;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler s(10, {.num_replicas = 4, .rank = r, .seed = 9});
    EXPECT_EQ(s.num_samples(), 3);
    EXPECT_EQ(s.total_size(), 12);
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(s.indices()[j], order[(r + 4 * j) % 10]);
    padded.insert(padded.end(), s.indices().begin(), s.indices().end());
  }
  std::set<int64_t> unique(padded.begin(), padded.end());
  EXPECT_EQ(unique.size(), 10u);  // everything covered; the two extras repeat order[0], order[1]
  // Fewer samples than replicas: wraps more than once.
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(2, {.num_replicas = 3, .rank = r, .shuffle = false});
    EXPECT_EQ(s.indices(), (std::vector<int64_t>{r % 2}));
  }
  // No padding: each sample exactly once, counts differ by at most one.
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler s(10, {.num_replicas = 4, .rank = r, .seed = 9, .pad = false});
    EXPECT_EQ(s.num_samples(), r < 2 ? 3 : 2);
    all.insert(all.end(), s.indices().begin(), s.indices().end());
  }
  EXPECT_TRUE(is_permutation_of_range(all, 10));
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 0}), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(-1), std::invalid_argument);
}

// ---- loader ---------------------------------------------------------------------------------

std::shared_ptr<const Dataset> synthetic(int64_t n, uint64_t seed = 11) {
  return std::make_shared<const Dataset>(make_synthetic(n, seed, true));
}

TEST(Loader, ShapesLabelsAndNormalisation) {
  auto ds = synthetic(100);
  DataLoader loader(ds, DistributedSampler(100, {.seed = 1}), 32, /*drop_last=*/true);
  EXPECT_EQ(loader.steps_per_epoch(), 3);
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->inputs.shape(), (Shape{32, 1, 28, 28}));
  EXPECT_EQ(b->labels.shape(), (Shape{32}));
  EXPECT_TRUE(b->inputs.dtype() == DType::f32 && b->labels.dtype() == DType::i32);
  EXPECT_EQ(b->step_in_epoch, 0);
  EXPECT_EQ(b->indices, std::vector<int64_t>(loader.sampler().indices().begin(),
                                             loader.sampler().indices().begin() + 32));
  const float* img = b->inputs.f32();
  for (int64_t s = 0; s < 32; ++s) {
    const int64_t i = b->indices[s];
    EXPECT_EQ(b->labels.data<int32_t>()[s], ds->labels[i]);
    for (int64_t k = 0; k < 784; k += 97) {
      const float p = ds->sample(i)[k];
      EXPECT_FLOAT_EQ(img[s * 784 + k], (p / 255.0f - ds->mean) / ds->std);
    }
  }
  // The extremes of the table, against hand-computed values.
  Dataset two = *ds;
  two.pixels[0] = 0;
  two.pixels[1] = 255;
  const int64_t zero = 0;
  Batch e = make_batch(two, std::span<const int64_t>(&zero, 1));
  EXPECT_FLOAT_EQ(e.inputs.f32()[0], -0.5f / 0.32f);
  EXPECT_FLOAT_EQ(e.inputs.f32()[1], 0.5f / 0.32f);
}

TEST(Loader, DropLastAndShortFinalBatch) {
  auto ds = synthetic(100);
  DataLoader train(ds, DistributedSampler(100, {.seed = 1}), 32, true);
  DataLoader eval(ds, DistributedSampler(100, {.shuffle = false}), 32, false);
  EXPECT_EQ(train.steps_per_epoch(), 3);
  EXPECT_EQ(eval.steps_per_epoch(), 4);
  int64_t seen = 0, steps = 0;
  while (auto b = eval.next()) {
    EXPECT_EQ(b->step_in_epoch, steps++);
    EXPECT_EQ(b->indices.front(), seen);  // identity order
    seen += b->size();
    if (b->step_in_epoch == 3) {
      EXPECT_EQ(b->inputs.shape(), (Shape{4, 1, 28, 28}));
    }
  }
  EXPECT_EQ(seen, 100);
  EXPECT_FALSE(eval.next().has_value());
  EXPECT_THROW(eval.batch_at(4), std::out_of_range);
  EXPECT_THROW(train.seek({0, 4}), std::out_of_range);
}

// The CONTRACT invariant: replicas interleave into the single-process global batch.
TEST(Loader, ReplicasInterleaveIntoSingleProcessBatch) {
  const int64_t n = 252, b = 5;  // 252 is a multiple of 2, 3 and 4: no padding
  auto ds = synthetic(n);
  for (int64_t R : {2, 3, 4}) {
    DataLoader single(ds, DistributedSampler(n, {.seed = 77}), R * b, true);
    std::vector<DataLoader> replicas;
    for (int64_t r = 0; r < R; ++r)
      replicas.emplace_back(ds, DistributedSampler(n, {.num_replicas = R, .rank = r, .seed = 77}),
                            b, true);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      single.set_epoch(epoch);
      for (auto& rep : replicas) {
        rep.set_epoch(epoch);
        ASSERT_EQ(rep.steps_per_epoch(), single.steps_per_epoch()) << "R=" << R;
      }
      while (auto global = single.next()) {
        std::multiset<int64_t> union_of_replicas;
        for (int64_t r = 0; r < R; ++r) {
          auto local = replicas[r].next();
          ASSERT_TRUE(local.has_value());
          ASSERT_EQ(local->size(), b);
          for (int64_t j = 0; j < b; ++j) {
            const int64_t pos = r + R * j;
            ASSERT_EQ(local->indices[j], global->indices[pos])
                << "R=" << R << " epoch " << epoch << " step " << global->step_in_epoch;
            const float* mine = local->inputs.f32() + j * 784;
            ASSERT_TRUE(std::equal(mine, mine + 784, global->inputs.f32() + pos * 784));
            union_of_replicas.insert(local->indices[j]);
          }
        }
        EXPECT_EQ(union_of_replicas,
                  std::multiset<int64_t>(global->indices.begin(), global->indices.end()));
      }
    }
  }
}

TEST(Loader, ResumeGivesIdenticalBatches) {
  auto ds = synthetic(90);
  auto make = [&] { return DataLoader(ds, DistributedSampler(90, {.num_replicas = 2, .rank = 1,
                                                                  .seed = 3}), 8, true); };
  // Straight run: 3 epochs of 5 steps (45 samples per replica).
  DataLoader a = make();
  std::vector<Batch> straight;
  for (int64_t e = 0; e < 3; ++e) {
    a.set_epoch(e);
    while (auto b = a.next()) straight.push_back(std::move(*b));
  }
  ASSERT_EQ(straight.size(), 15u);
  // Resume after global step 7 (epoch 1, step 2), as from a checkpoint.
  DataLoader r = make();
  const LoaderPosition pos = r.position_of(7);
  EXPECT_EQ(pos, (LoaderPosition{1, 2}));
  r.seek(pos);
  size_t k = 7;
  for (int64_t e = pos.epoch; e < 3; ++e) {
    if (e != pos.epoch) r.set_epoch(e);
    while (auto b = r.next()) {
      ASSERT_LT(k, straight.size());
      EXPECT_EQ((LoaderPosition{b->epoch, b->step_in_epoch}),
                (LoaderPosition{straight[k].epoch, straight[k].step_in_epoch}));
      EXPECT_EQ(b->indices, straight[k].indices);
      EXPECT_EQ(std::memcmp(b->inputs.f32(), straight[k].inputs.f32(), b->inputs.nbytes()), 0);
      ++k;
    }
  }
  EXPECT_EQ(k, straight.size());
  // Seeking to the end of an epoch is allowed and yields nothing more.
  r.seek({0, r.steps_per_epoch()});
  EXPECT_FALSE(r.next().has_value());
}

}  // namespace
}  // namespace tandem
