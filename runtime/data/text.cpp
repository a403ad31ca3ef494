// Text loading (read, hash-check, byte-level encoding, the 90/10 split) and the two text
// loaders.
// Invariant: a returned TextDataset has both splits at least one window long; every batch is a
// pure function of its position (and, for training, of seed, rank and batch size), never of
// loader history. Window starts come only from data_random (portable integer hashing).
#include "runtime/data/text.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "runtime/data/random.h"

#ifndef TANDEM_SOURCE_DATA_DIR
#error "TANDEM_SOURCE_DATA_DIR must name the repository's data/ directory (runtime/CMakeLists.txt)"
#endif

namespace tandem {

namespace {

// Stream tags keep the training and evaluation draws apart from every other data_random use.
constexpr uint64_t kTrainStream = 0x7465787474726169ULL;  // "texttrai"
// The evaluation set's seed: a constant, so every run and every world size evaluates the same
// windows.
constexpr uint64_t kEvalSeed = 0x746578746576616cULL;  // "texteval"

std::vector<uint8_t> read_file(const std::string& path, const std::string& missing_hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::runtime_error("text data file '" + path + "' does not exist" + missing_hint);
  if (fs::is_directory(path, ec))
    throw std::runtime_error("text data file '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("text data file '" + path + "' cannot be opened for reading");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("text data file '" + path + "': read error");
  return bytes;
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string byte_str(uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  s += kHex[b >> 4];
  s += kHex[b & 15];
  if (b >= 0x20 && b < 0x7f) s += std::string(" '") + static_cast<char>(b) + "'";
  return s;
}

void check_seek(const char* who, LoaderPosition position, int64_t steps) {
  if (position.epoch < 0)
    throw std::out_of_range(std::string(who) + ": negative epoch " + std::to_string(position.epoch));
  if (position.step_in_epoch < 0 || position.step_in_epoch > steps)
    throw std::out_of_range(std::string(who) + ": step " + std::to_string(position.step_in_epoch) +
                            " is outside an epoch of " + std::to_string(steps) + " steps");
}

void check_sizes(const char* who, const std::shared_ptr<const TextDataset>& dataset,
                 int64_t context, int64_t batch_size) {
  if (!dataset) throw std::invalid_argument(std::string(who) + ": no dataset");
  if (context < 1)
    throw std::invalid_argument(std::string(who) + ": context must be >= 1, got " +
                                std::to_string(context));
  if (batch_size < 1)
    throw std::invalid_argument(std::string(who) + ": batch size must be >= 1, got " +
                                std::to_string(batch_size));
}

}  // namespace

std::span<const int32_t> TextDataset::train() const {
  return std::span<const int32_t>(tokens).first(static_cast<size_t>(train_tokens));
}

std::span<const int32_t> TextDataset::validation() const {
  return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(train_tokens));
}

std::vector<int32_t> TextDataset::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    const auto it = std::lower_bound(vocab.begin(), vocab.end(), b);
    if (it == vocab.end() || *it != b)
      throw std::invalid_argument("text dataset '" + name + "': byte " + byte_str(b) +
                                  " at offset " + std::to_string(i) + " is not in its " +
                                  std::to_string(vocab.size()) + "-byte vocabulary");
    out.push_back(static_cast<int32_t>(it - vocab.begin()));
  }
  return out;
}

std::string TextDataset::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab_size())
      throw std::out_of_range("text dataset '" + name + "': token " + std::to_string(t) +
                              " is outside its vocabulary of " + std::to_string(vocab_size()));
    out.push_back(static_cast<char>(vocab[static_cast<size_t>(t)]));
  }
  return out;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL's EVP_Digest failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

TextDataset load_text(const std::string& path, const std::string& name,
                      std::optional<std::string> expected_sha256, int64_t context,
                      const std::vector<uint8_t>* vocab) {
  if (context < 1)
    throw std::invalid_argument("load_text: context must be >= 1, got " + std::to_string(context));
  const bool shakespeare = expected_sha256 && lowercase(*expected_sha256) == kShakespeareSha256;
  const std::string hint =
      shakespeare ? " (the repository ships it as data/tinyshakespeare.txt; set TANDEM_DATA_DIR "
                    "to a directory holding tinyshakespeare.txt)"
                  : "";
  const std::vector<uint8_t> bytes = read_file(path, hint);
  if (bytes.empty()) throw std::runtime_error("text data file '" + path + "' is empty");
  if (expected_sha256) {
    const std::string actual = sha256_hex(bytes);
    if (actual != lowercase(*expected_sha256))
      throw std::runtime_error("text data file '" + path + "' (" + std::to_string(bytes.size()) +
                               " bytes) has sha256 " + actual + ", expected " + *expected_sha256 +
                               " for '" + name + "': the file is corrupt or not the right one");
  }

  TextDataset ds;
  ds.name = name;
  ds.path = path;
  std::array<bool, 256> present{};
  if (vocab) {
    for (uint8_t b : *vocab) present[b] = true;
  } else {
    for (uint8_t b : bytes) present[b] = true;
  }
  std::array<int32_t, 256> token_of{};
  for (int b = 0; b < 256; ++b)
    if (present[static_cast<size_t>(b)]) {
      token_of[static_cast<size_t>(b)] = static_cast<int32_t>(ds.vocab.size());
      ds.vocab.push_back(static_cast<uint8_t>(b));
    }
  ds.tokens.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!present[bytes[i]]) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", bytes[i]);
      throw std::runtime_error("text data file '" + path + "' holds byte " + byte + " at offset " +
                               std::to_string(i) + ", which the given vocabulary of " +
                               std::to_string(vocab->size()) + " bytes lacks");
    }
    ds.tokens[i] = token_of[bytes[i]];
  }
  ds.train_tokens = ds.size() * 9 / 10;

  const int64_t window = context + 1;
  if (ds.train_tokens < window || ds.val_tokens() < window)
    throw std::runtime_error(
        "text data file '" + path + "' is too short for context " + std::to_string(context) +
        ": its " + std::to_string(ds.size()) + " tokens split into " +
        std::to_string(ds.train_tokens) + " training and " + std::to_string(ds.val_tokens()) +
        " validation tokens, and each split needs at least one window of context + 1 = " +
        std::to_string(window) + " tokens (a file of at least " +
        std::to_string(std::max<int64_t>(10 * window - 9, (10 * window + 8) / 9)) +
        " bytes); use a longer text or a shorter context");
  return ds;
}

std::string default_shakespeare_path() {
  namespace fs = std::filesystem;
  const char* dir = std::getenv("TANDEM_DATA_DIR");
  if (dir != nullptr && *dir != '\0') return (fs::path(dir) / "tinyshakespeare.txt").string();
  const fs::path source = fs::path(TANDEM_SOURCE_DATA_DIR) / "tinyshakespeare.txt";
  // An installed program (cmake --install) finds the copy installed beside it:
  // PREFIX/bin/PROGRAM -> PREFIX/share/tandem/data. The source tree's copy comes first.
  std::error_code ec;
  if (!fs::exists(source, ec)) {
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const fs::path installed = exe.parent_path().parent_path() / "share" / "tandem" / "data" / "tinyshakespeare.txt";
      if (fs::exists(installed, ec)) return installed.string();
    }
  }
  return source.string();
}

Batch make_text_batch(const TextDataset& dataset, std::span<const int64_t> starts, int64_t context) {
  const int64_t B = static_cast<int64_t>(starts.size()), T = context;
  Batch batch;
  batch.inputs = Tensor::empty({B, T}, DType::i32);
  batch.labels = Tensor::empty({B * T}, DType::i32);
  batch.indices.assign(starts.begin(), starts.end());
  int32_t* inputs = batch.inputs.data<int32_t>();
  int32_t* labels = batch.labels.data<int32_t>();
  const int32_t* tokens = dataset.tokens.data();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = starts[static_cast<size_t>(b)];
    if (s < 0 || s + T + 1 > dataset.size())
      throw std::out_of_range("make_text_batch: window [" + std::to_string(s) + ", " +
                              std::to_string(s + T + 1) + ") is outside text dataset '" +
                              dataset.name + "' of " + std::to_string(dataset.size()) + " tokens");
    std::copy_n(tokens + s, T, inputs + b * T);
    std::copy_n(tokens + s + 1, T, labels + b * T);
  }
  return batch;
}

// ---- TextLoader ------------------------------------------------------------------------------

TextLoader::TextLoader(std::shared_ptr<const TextDataset> dataset, int64_t context,
                       int64_t batch_size, int64_t replicas, int64_t rank, uint64_t seed)
    : dataset_(std::move(dataset)), context_(context), batch_size_(batch_size),
      replicas_(replicas), rank_(rank), seed_(seed) {
  check_sizes("TextLoader", dataset_, context_, batch_size_);
  if (replicas_ < 1)
    throw std::invalid_argument("TextLoader: replicas must be >= 1, got " + std::to_string(replicas_));
  if (rank_ < 0 || rank_ >= replicas_)
    throw std::invalid_argument("TextLoader: rank " + std::to_string(rank_) + " is outside [0, " +
                                std::to_string(replicas_) + ")");
  if (dataset_->train_tokens < context_ + 1)
    throw std::invalid_argument("TextLoader: the training split of '" + dataset_->name + "' has " +
                                std::to_string(dataset_->train_tokens) +
                                " tokens, fewer than one window of context + 1 = " +
                                std::to_string(context_ + 1));
  steps_per_epoch_ =
      std::max<int64_t>(1, dataset_->train_tokens / (batch_size_ * replicas_ * context_));
}

void TextLoader::seek(LoaderPosition position) {
  check_seek("TextLoader", position, steps_per_epoch_);
  position_ = position;
}

std::optional<Batch> TextLoader::next() {
  if (position_.step_in_epoch >= steps_per_epoch_) return std::nullopt;
  Batch batch = batch_at(position_);
  ++position_.step_in_epoch;
  return batch;
}

int64_t TextLoader::window_start(int64_t global_step, int64_t window) const {
  using data_random::hash2;
  const uint64_t stream = hash2(hash2(kTrainStream, seed_), static_cast<uint64_t>(global_step));
  data_random::SplitMix64 rng(hash2(stream, static_cast<uint64_t>(window)));
  // start + context + 1 <= train_tokens: the labels stay inside the training split.
  return static_cast<int64_t>(rng.below(static_cast<uint64_t>(dataset_->train_tokens - context_)));
}

Batch TextLoader::batch_at(LoaderPosition position) const {
  if (position.epoch < 0 || position.step_in_epoch < 0 || position.step_in_epoch >= steps_per_epoch_)
    throw std::out_of_range("TextLoader: no batch at epoch " + std::to_string(position.epoch) +
                            ", step " + std::to_string(position.step_in_epoch) + " (an epoch has " +
                            std::to_string(steps_per_epoch_) + " steps)");
  const int64_t g = position.epoch * steps_per_epoch_ + position.step_in_epoch;
  std::vector<int64_t> starts(static_cast<size_t>(batch_size_));
  for (int64_t i = 0; i < batch_size_; ++i)
    starts[static_cast<size_t>(i)] = window_start(g, rank_ * batch_size_ + i);
  Batch batch = make_text_batch(*dataset_, starts, context_);
  batch.epoch = position.epoch;
  batch.step_in_epoch = position.step_in_epoch;
  return batch;
}

// ---- TextEvalLoader --------------------------------------------------------------------------

TextEvalLoader::TextEvalLoader(std::shared_ptr<const TextDataset> dataset, int64_t context,
                               int64_t batch_size, int64_t windows)
    : dataset_(std::move(dataset)), context_(context), batch_size_(batch_size), windows_(windows) {
  check_sizes("TextEvalLoader", dataset_, context_, batch_size_);
  if (windows_ < 1)
    throw std::invalid_argument("TextEvalLoader: windows must be >= 1, got " + std::to_string(windows_));
  if (dataset_->val_tokens() < context_ + 1)
    throw std::invalid_argument("TextEvalLoader: the validation split of '" + dataset_->name +
                                "' has " + std::to_string(dataset_->val_tokens()) +
                                " tokens, fewer than one window of context + 1 = " +
                                std::to_string(context_ + 1));
}

void TextEvalLoader::seek(LoaderPosition position) {
  check_seek("TextEvalLoader", position, steps_per_epoch());
  position_ = position;
}

std::optional<Batch> TextEvalLoader::next() {
  if (position_.step_in_epoch >= steps_per_epoch()) return std::nullopt;
  Batch batch = batch_at(position_.step_in_epoch);
  batch.epoch = position_.epoch;
  ++position_.step_in_epoch;
  return batch;
}

int64_t TextEvalLoader::window_start(int64_t window) const {
  data_random::SplitMix64 rng(data_random::hash2(kEvalSeed, static_cast<uint64_t>(window)));
  return dataset_->train_tokens +
         static_cast<int64_t>(rng.below(static_cast<uint64_t>(dataset_->val_tokens() - context_)));
}

Batch TextEvalLoader::batch_at(int64_t step) const {
  const int64_t steps = steps_per_epoch();
  if (step < 0 || step >= steps)
    throw std::out_of_range("TextEvalLoader: batch " + std::to_string(step) +
                            " is outside a set of " + std::to_string(steps) + " batches");
  const int64_t begin = step * batch_size_, end = std::min(begin + batch_size_, windows_);
  std::vector<int64_t> starts;
  starts.reserve(static_cast<size_t>(end - begin));
  for (int64_t k = begin; k < end; ++k) starts.push_back(window_start(k));
  Batch batch = make_text_batch(*dataset_, starts, context_);
  batch.epoch = position_.epoch;
  batch.step_in_epoch = step;
  return batch;
}

}  // namespace tandem
