// Character-level text for language models (`--data shakespeare`, `--data text:PATH`): a
// text file held in memory as tokens, a training loader of random windows and a fixed
// evaluation set.
// Invariants: the vocabulary is the file's sorted distinct BYTES, so a UTF-8 file's
// multi-byte characters become several tokens and any file loads; the first 90% (floor) of
// the tokens train, the rest validate, and no window crosses from one split into the other.
// A training window's start is a pure function of (seed, global step, global window index),
// so seek() resumes exactly and replica r of R draws rows r*B .. r*B+B-1 of what one process
// with batch R*B draws; the evaluation windows depend on nothing but the dataset, the
// context and their index.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/runtime/data/loader.h"

namespace tandem {

// sha256 of the tinyshakespeare.txt the repository ships in data/ (1,115,394 bytes).
inline constexpr const char* kShakespeareSha256 =
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed";
// Validation windows a TextEvalLoader serves unless told otherwise.
inline constexpr int64_t kDefaultEvalWindows = 2400;

struct TextDataset {
  std::string name;              // "shakespeare", or the path of a --data text:PATH file
  std::string path;              // the file it was read from
  std::vector<uint8_t> vocab;    // sorted distinct bytes of the file; token k is byte vocab[k]
  std::vector<int32_t> tokens;   // (size) the whole file, encoded
  int64_t train_tokens = 0;      // tokens [0, train_tokens) train, the rest validate

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t val_tokens() const { return size() - train_tokens; }
  std::span<const int32_t> train() const;       // tokens [0, train_tokens)
  std::span<const int32_t> validation() const;  // tokens [train_tokens, size)
  // Throws std::invalid_argument naming the first byte that is not in the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws std::out_of_range for a token outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> tokens) const;
};

// Lowercase hex sha256 of `bytes` (OpenSSL's EVP API). Throws std::runtime_error if OpenSSL fails.
std::string sha256_hex(std::span<const uint8_t> bytes);

// Reads and encodes a text file. Throws std::runtime_error naming the file and the problem:
// missing or unreadable, empty, sha256 different from `expected_sha256` (both given), or a
// split shorter than one window of context + 1 tokens (the sizes given). Throws
// std::invalid_argument for context < 1. `vocab`, when given (a fine-tune keeps its
// pretrained model's vocabulary: vocab_from_meta), is the vocabulary instead of the file's
// own bytes: a byte outside it is a std::runtime_error naming the byte and its offset.
TextDataset load_text(const std::string& path, const std::string& name,
                      std::optional<std::string> expected_sha256, int64_t context,
                      const std::vector<uint8_t>* vocab = nullptr);

// $TANDEM_DATA_DIR/tinyshakespeare.txt when that variable is set and not empty, else the
// repository's data/tinyshakespeare.txt (its absolute path is compiled in), else, for an
// installed program whose source tree is gone, PREFIX/share/tandem/data/tinyshakespeare.txt.
std::string default_shakespeare_path();

// Gathers windows of `context` tokens of `dataset` starting at `starts`: inputs (B, T) i32 =
// tokens[s, s+T), labels (B*T) i32 = tokens[s+1, s+T+1), indices = starts. Throws
// std::out_of_range for a window that does not fit in the tokens.
Batch make_text_batch(const TextDataset& dataset, std::span<const int64_t> starts, int64_t context);

// Training: an epoch is steps_per_epoch() = max(1, train_tokens / (batch_size*replicas*context))
// steps, about as many window tokens as the training split holds. At global step
// g = epoch*steps_per_epoch() + step, replica `rank`'s i-th window is global window
// j = rank*batch_size + i, starting uniformly in [0, train_tokens - context - 1].
class TextLoader final : public BatchSource {
 public:
  // Throws std::invalid_argument for a null dataset, context/batch_size/replicas < 1, rank
  // outside [0, replicas), or a training split shorter than context + 1 tokens.
  TextLoader(std::shared_ptr<const TextDataset> dataset, int64_t context, int64_t batch_size,
             int64_t replicas, int64_t rank, uint64_t seed);

  int64_t batch_size() const override { return batch_size_; }
  int64_t replicas() const override { return replicas_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  // Throws std::out_of_range for a negative epoch or a step outside [0, steps_per_epoch()].
  void seek(LoaderPosition position) override;
  LoaderPosition position() const override { return position_; }
  std::optional<Batch> next() override;
  // The batch at `position` (step < steps_per_epoch()), without moving the position.
  Batch batch_at(LoaderPosition position) const;
  // Start of global window `window` (any replica's: rank*batch_size + i) at `global_step`.
  int64_t window_start(int64_t global_step, int64_t window) const;

  int64_t context() const { return context_; }
  int64_t rank() const { return rank_; }
  uint64_t seed() const { return seed_; }
  const TextDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const TextDataset> dataset_;
  int64_t context_, batch_size_, replicas_, rank_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  LoaderPosition position_;
};

// Evaluation: `windows` fixed validation windows, window k starting at train_tokens +
// (a hash of k under a constant seed) uniform in [0, val_tokens - context - 1], served in
// order in batches of batch_size (the last may be short). Independent of --seed and of the
// world size: every rank evaluates the whole set, so replicas() == 1. The epoch only labels
// the batches.
class TextEvalLoader final : public BatchSource {
 public:
  // Throws std::invalid_argument for a null dataset, context/batch_size/windows < 1, or a
  // validation split shorter than context + 1 tokens.
  TextEvalLoader(std::shared_ptr<const TextDataset> dataset, int64_t context, int64_t batch_size,
                 int64_t windows = kDefaultEvalWindows);

  int64_t batch_size() const override { return batch_size_; }
  int64_t replicas() const override { return 1; }
  int64_t steps_per_epoch() const override { return (windows_ + batch_size_ - 1) / batch_size_; }
  // Throws std::out_of_range for a negative epoch or a step outside [0, steps_per_epoch()].
  void seek(LoaderPosition position) override;
  LoaderPosition position() const override { return position_; }
  std::optional<Batch> next() override;
  // Batch `step` of the set (step < steps_per_epoch()), without moving the position.
  Batch batch_at(int64_t step) const;
  // Start (an index into dataset().tokens) of evaluation window `window`.
  int64_t window_start(int64_t window) const;

  int64_t windows() const { return windows_; }
  int64_t context() const { return context_; }
  const TextDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const TextDataset> dataset_;
  int64_t context_, batch_size_, windows_;
  LoaderPosition position_;
};

}  // namespace tandem
