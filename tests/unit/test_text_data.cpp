// Text data tests: the shipped tinyshakespeare.txt (size, vocabulary, split, hash), byte-level
// encoding, every load_text error (on small files written here), and the text loaders.
// The key invariants: replica r of W draws rows r*B .. r*B+B-1 of the single-process batch at
// W*B (W = 2, 3, 4), seek() resumes exactly, and the evaluation set depends on nothing but the
// dataset, the context and the window index.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "runtime/data/text.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// A fresh directory for this test's files, removed with everything in it.
struct TempDir : tandem::testing::TempDir {
  TempDir() : tandem::testing::TempDir("tandem_test_text") {}
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
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

std::vector<int32_t> values(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// Rows [row, row + rows) of a (B, T) or (B*T) batch tensor whose rows hold T elements.
std::vector<int32_t> rows_of(const Tensor& t, int64_t row, int64_t rows, int64_t T) {
  const int32_t* p = t.data<int32_t>() + row * T;
  return std::vector<int32_t>(p, p + rows * T);
}

constexpr int64_t kContext = 32;

// The real file, loaded once for the whole suite (1.1 MB read and hashed).
std::shared_ptr<const TextDataset> shakespeare() {
  static const auto ds = std::make_shared<const TextDataset>(
      load_text(default_shakespeare_path(), "shakespeare", std::string(kShakespeareSha256), kContext));
  return ds;
}

// ---- the dataset ----------------------------------------------------------------------------

TEST(TextData, ShakespeareLoadsWithItsKnownShape) {
  const TextDataset& ds = *shakespeare();
  EXPECT_EQ(ds.name, "shakespeare");
  EXPECT_EQ(ds.path, default_shakespeare_path());
  EXPECT_EQ(ds.vocab_size(), 65);
  EXPECT_EQ(std::string(ds.vocab.begin(), ds.vocab.end()),
            "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(ds.size(), 1115394);
  EXPECT_EQ(ds.train_tokens, 1003854);
  EXPECT_EQ(ds.val_tokens(), 111540);
  EXPECT_EQ(ds.train().size(), 1003854u);
  EXPECT_EQ(ds.validation().size(), 111540u);
  EXPECT_EQ(ds.validation().data(), ds.tokens.data() + 1003854);
  EXPECT_EQ(ds.decode(std::span<const int32_t>(ds.tokens).first(14)), "First Citizen:");
  EXPECT_EQ(ds.encode("First"), (std::vector<int32_t>{18, 47, 56, 57, 58}));
}

TEST(TextData, Sha256IsOpenSslsAndTheShippedFileMatches) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex(std::span(reinterpret_cast<const uint8_t*>(abc.data()), abc.size())),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::ifstream in(default_shakespeare_path(), std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(sha256_hex(bytes), kShakespeareSha256);
  // An uppercase expected hash is the same hash.
  std::string upper = kShakespeareSha256;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(load_text(default_shakespeare_path(), "s", upper, 8).size(), 1115394);
}

TEST(TextData, EncodeDecodeRoundTrip) {
  const TextDataset& ds = *shakespeare();
  const std::string s = "ROMEO:\nO, she doth teach the torches to burn bright!\n";
  EXPECT_EQ(ds.decode(ds.encode(s)), s);
  const std::vector<int32_t> all = [&] {
    std::vector<int32_t> v(65);
    for (int32_t k = 0; k < 65; ++k) v[static_cast<size_t>(k)] = k;
    return v;
  }();
  EXPECT_EQ(ds.encode(ds.decode(all)), all);
  std::ifstream in(default_shakespeare_path(), std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ds.decode(ds.tokens), file);
  EXPECT_THROW(ds.encode("100%"), std::invalid_argument);  // '1', '0' and '%' are not in it
  EXPECT_THROW(ds.decode(std::vector<int32_t>{65}), std::out_of_range);
  EXPECT_THROW(ds.decode(std::vector<int32_t>{-1}), std::out_of_range);
}

TEST(TextData, Utf8CharactersBecomeSeveralByteTokens) {
  TempDir dir;
  write_file(dir.file("u.txt"), "h\xc3\xa9h\xc3\xa9h\xc3\xa9h\xc3\xa9h\xc3\xa9!");  // "héhéhéhéhé!"
  const TextDataset ds = load_text(dir.file("u.txt"), "u", std::nullopt, 1);
  EXPECT_EQ(ds.vocab, (std::vector<uint8_t>{'!', 'h', 0xa9, 0xc3}));
  EXPECT_EQ(ds.size(), 16);
  EXPECT_EQ(ds.train_tokens, 14);  // floor(16 * 0.9)
  EXPECT_EQ(ds.encode("h\xc3\xa9"), (std::vector<int32_t>{1, 3, 2}));
}

// A fine-tune encodes its text with the pretrained vocabulary (a superset of the text's
// bytes): token k is byte vocab[k]; a byte outside it is refused, named with its offset.
TEST(TextData, AGivenVocabularyEncodesTheTextOrNamesTheByteItLacks) {
  TempDir dir;
  write_file(dir.file("t.txt"), "abababababab\nbababababa");
  const std::vector<uint8_t> vocab = {'\n', ' ', 'a', 'b', 'c'};
  const TextDataset ds = load_text(dir.file("t.txt"), "t", std::nullopt, 2, &vocab);
  EXPECT_EQ(ds.vocab, vocab);
  EXPECT_EQ(ds.tokens[0], 2);   // 'a'
  EXPECT_EQ(ds.tokens[1], 3);   // 'b'
  EXPECT_EQ(ds.tokens[12], 0);  // '\n'
  const std::vector<uint8_t> small = {'\n', 'a'};
  try {
    load_text(dir.file("t.txt"), "t", std::nullopt, 2, &small);
    FAIL() << "a byte outside the vocabulary was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds byte 0x62 at offset 1, which the given vocabulary of 2 bytes lacks"),
              std::string::npos)
        << e.what();
  }
}

TEST(TextData, EnvironmentOverridesTheDataDirectory) {
  const char* old = std::getenv("TANDEM_DATA_DIR");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ASSERT_EQ(setenv("TANDEM_DATA_DIR", "/somewhere/else", 1), 0);
  EXPECT_EQ(default_shakespeare_path(), "/somewhere/else/tinyshakespeare.txt");
  ASSERT_EQ(unsetenv("TANDEM_DATA_DIR"), 0);
  EXPECT_EQ(fs::path(default_shakespeare_path()).filename(), "tinyshakespeare.txt");
  EXPECT_EQ(fs::path(default_shakespeare_path()).parent_path().filename(), "data");
  EXPECT_TRUE(fs::exists(default_shakespeare_path()));
  if (saved) setenv("TANDEM_DATA_DIR", saved->c_str(), 1);
}

// ---- errors ---------------------------------------------------------------------------------

TEST(TextData, MissingAndEmptyFiles) {
  TempDir dir;
  expect_error([&] { load_text(dir.file("none.txt"), "x", std::nullopt, 4); },
               {"text data file '" + dir.file("none.txt") + "' does not exist"});
  expect_error([&] { load_text(dir.file("none.txt"), "shakespeare", std::string(kShakespeareSha256), 4); },
               {"'" + dir.file("none.txt") + "' does not exist", "TANDEM_DATA_DIR"});
  expect_error([&] { load_text(dir.file(""), "x", std::nullopt, 4); }, {"is a directory"});
  write_file(dir.file("empty.txt"), "");
  expect_error([&] { load_text(dir.file("empty.txt"), "x", std::nullopt, 4); },
               {"text data file '" + dir.file("empty.txt") + "' is empty"});
  EXPECT_THROW(load_text(dir.file("empty.txt"), "x", std::nullopt, 0), std::invalid_argument);
}

TEST(TextData, HashMismatchSaysExpectedAndActual) {
  TempDir dir;
  write_file(dir.file("hello.txt"), "hello\n");
  expect_error([&] { load_text(dir.file("hello.txt"), "shakespeare", std::string(kShakespeareSha256), 1); },
               {"text data file '" + dir.file("hello.txt") + "'",
                "has sha256 5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
                std::string("expected ") + kShakespeareSha256});
  // The right hash passes the check; then 6 tokens split 5 + 1, too short for a window of 2.
  expect_error(
      [&] {
        load_text(dir.file("hello.txt"), "h",
                  std::string("5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"), 1);
      },
      {"'" + dir.file("hello.txt") + "' is too short", "5 training and 1 validation"});
}

TEST(TextData, TextShorterThanOneWindow) {
  TempDir dir;
  write_file(dir.file("short.txt"), "abcdefghijklmnopqrst");  // 20 tokens: 18 train, 2 validation
  // Only the validation split is short.
  expect_error([&] { load_text(dir.file("short.txt"), "short", std::nullopt, 8); },
               {"text data file '" + dir.file("short.txt") + "' is too short for context 8",
                "20 tokens split into 18 training and 2 validation tokens",
                "context + 1 = 9 tokens", "at least 81 bytes"});
  // Both splits are short.
  expect_error([&] { load_text(dir.file("short.txt"), "short", std::nullopt, 30); },
               {"text data file '" + dir.file("short.txt") + "' is too short for context 30",
                "18 training and 2 validation", "context + 1 = 31 tokens", "at least 301 bytes"});
  // The stated minimum is exact: 81 bytes fit context 8 (72 + 9), 80 do not (72 + 8).
  write_file(dir.file("81.txt"), std::string(81, 'a'));
  EXPECT_EQ(load_text(dir.file("81.txt"), "a", std::nullopt, 8).val_tokens(), 9);
  write_file(dir.file("80.txt"), std::string(80, 'a'));
  EXPECT_THROW(load_text(dir.file("80.txt"), "a", std::nullopt, 8), std::runtime_error);
  // The largest context it fits is 1 (validation holds 2 tokens).
  EXPECT_EQ(load_text(dir.file("short.txt"), "short", std::nullopt, 1).train_tokens, 18);
}

TEST(TextData, LoaderArgumentsAreChecked) {
  auto ds = shakespeare();
  EXPECT_THROW(TextLoader(nullptr, 8, 2, 1, 0, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 0, 2, 1, 0, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 8, 0, 1, 0, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 8, 2, 0, 0, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 8, 2, 2, 2, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 8, 2, 2, -1, 1), std::invalid_argument);
  EXPECT_THROW(TextLoader(ds, 1003854, 2, 1, 0, 1), std::invalid_argument);  // window of 1003855
  EXPECT_NO_THROW(TextLoader(ds, 1003853, 1, 1, 0, 1));
  EXPECT_THROW(TextEvalLoader(ds, 8, 2, 0), std::invalid_argument);
  EXPECT_THROW(TextEvalLoader(ds, 111540, 2), std::invalid_argument);
  EXPECT_THROW(make_text_batch(*ds, std::vector<int64_t>{1115394 - 8}, 8), std::out_of_range);
  EXPECT_EQ(make_text_batch(*ds, std::vector<int64_t>{1115394 - 9}, 8).size(), 1);
}

// ---- the training loader --------------------------------------------------------------------

TEST(TextData, WindowsAreTokensAndLabelsAreShiftedByOne) {
  auto ds = shakespeare();
  TextLoader loader(ds, kContext, 8, 1, 0, 7);
  EXPECT_EQ(loader.steps_per_epoch(), 3921);  // 1003854 / (8 * 1 * 32)
  for (int64_t step : {0, 1, 3920}) {
    const Batch b = loader.batch_at({2, step});
    EXPECT_EQ(b.epoch, 2);
    EXPECT_EQ(b.step_in_epoch, step);
    EXPECT_EQ(b.inputs.shape(), (Shape{8, kContext}));
    EXPECT_EQ(b.inputs.dtype(), DType::i32);
    EXPECT_EQ(b.labels.shape(), (Shape{8 * kContext}));
    EXPECT_EQ(b.labels.dtype(), DType::i32);
    ASSERT_EQ(b.size(), 8);
    const std::vector<int32_t> in = values(b.inputs), lab = values(b.labels);
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t s = b.indices[static_cast<size_t>(i)];
      EXPECT_EQ(s, loader.window_start(2 * 3921 + step, i));
      ASSERT_GE(s, 0);
      ASSERT_LE(s + kContext + 1, ds->train_tokens);  // labels stay in the training split
      for (int64_t t = 0; t < kContext; ++t) {
        EXPECT_EQ(in[static_cast<size_t>(i * kContext + t)], ds->tokens[static_cast<size_t>(s + t)]);
        EXPECT_EQ(lab[static_cast<size_t>(i * kContext + t)], ds->tokens[static_cast<size_t>(s + t + 1)]);
      }
      for (int64_t t = 0; t + 1 < kContext; ++t)
        EXPECT_EQ(lab[static_cast<size_t>(i * kContext + t)], in[static_cast<size_t>(i * kContext + t + 1)]);
    }
  }
}

TEST(TextData, StartsCoverTheWholeTrainingRangeAndNoMore) {
  // A 100-token text with context 4: starts lie in [0, 90 - 4 - 1] = [0, 85], all reached.
  TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  write_file(dir.file("t.txt"), text);
  auto ds = std::make_shared<const TextDataset>(load_text(dir.file("t.txt"), "t", std::nullopt, 4));
  ASSERT_EQ(ds->train_tokens, 90);
  TextLoader loader(ds, 4, 16, 1, 0, 3);
  std::vector<int> seen(90, 0);
  for (int64_t g = 0; g < 200; ++g)
    for (int64_t j = 0; j < 16; ++j) ++seen[static_cast<size_t>(loader.window_start(g, j))];
  for (int s = 0; s <= 85; ++s) EXPECT_GT(seen[static_cast<size_t>(s)], 0) << "start " << s;
  for (int s = 86; s < 90; ++s) EXPECT_EQ(seen[static_cast<size_t>(s)], 0) << "start " << s;
}

TEST(TextData, ReplicasSplitTheSingleProcessBatch) {
  auto ds = shakespeare();
  constexpr int64_t B = 3;
  for (int64_t W : {2, 3, 4}) {
    TextLoader single(ds, kContext, W * B, 1, 0, 11);
    for (int64_t r = 0; r < W; ++r) {
      TextLoader replica(ds, kContext, B, W, r, 11);
      ASSERT_EQ(replica.steps_per_epoch(), single.steps_per_epoch()) << "W " << W;
      for (LoaderPosition pos : {LoaderPosition{0, 0}, LoaderPosition{0, 5}, LoaderPosition{3, 17}}) {
        const Batch whole = single.batch_at(pos), part = replica.batch_at(pos);
        const std::vector<int64_t> expect_idx(whole.indices.begin() + r * B,
                                              whole.indices.begin() + (r + 1) * B);
        EXPECT_EQ(part.indices, expect_idx) << "W " << W << " rank " << r;
        EXPECT_EQ(values(part.inputs), rows_of(whole.inputs, r * B, B, kContext));
        EXPECT_EQ(values(part.labels), rows_of(whole.labels, r * B, B, kContext));
      }
    }
  }
}

TEST(TextData, DeterministicAndSeekResumesExactly) {
  auto ds = shakespeare();
  const auto make = [&] { return TextLoader(ds, 256, 64, 2, 1, 5); };
  TextLoader run = make();
  ASSERT_EQ(run.steps_per_epoch(), 30);  // 1003854 / (64 * 2 * 256)
  // An uninterrupted run of 70 batches, across two epoch boundaries.
  std::vector<Batch> all;
  while (all.size() < 70) {
    std::optional<Batch> b = run.next();
    if (!b) {
      EXPECT_EQ(run.position(), (LoaderPosition{run.position().epoch, 30}));
      run.set_epoch(run.position().epoch + 1);
      continue;
    }
    all.push_back(std::move(*b));
  }
  EXPECT_EQ(all[45].epoch, 1);
  EXPECT_EQ(all[45].step_in_epoch, 15);
  for (int64_t k : {0, 7, 29, 30, 31, 59, 60}) {
    TextLoader resumed = make();
    resumed.seek(resumed.position_of(k));
    for (int64_t n = 0; n < 5; ++n) {
      std::optional<Batch> b = resumed.next();
      if (!b) {
        resumed.set_epoch(resumed.position().epoch + 1);
        b = resumed.next();
      }
      ASSERT_TRUE(b.has_value());
      const Batch& want = all[static_cast<size_t>(k + n)];
      EXPECT_EQ(b->epoch, want.epoch);
      EXPECT_EQ(b->step_in_epoch, want.step_in_epoch);
      EXPECT_EQ(b->indices, want.indices) << "resumed at " << k << ", batch " << n;
      EXPECT_EQ(values(b->inputs), values(want.inputs));
      EXPECT_EQ(values(b->labels), values(want.labels));
    }
  }
  // seek() to the end of an epoch is allowed (next() then says it is done); beyond is not.
  TextLoader l = make();
  l.seek({2, 30});
  EXPECT_FALSE(l.next().has_value());
  EXPECT_THROW(l.seek({2, 31}), std::out_of_range);
  EXPECT_THROW(l.seek({-1, 0}), std::out_of_range);
  EXPECT_THROW(l.batch_at({0, 30}), std::out_of_range);
}

TEST(TextData, SeedsAndStepsGiveDifferentWindows) {
  auto ds = shakespeare();
  TextLoader a(ds, kContext, 16, 1, 0, 1), b(ds, kContext, 16, 1, 0, 2);
  EXPECT_NE(a.batch_at({0, 0}).indices, b.batch_at({0, 0}).indices);
  EXPECT_NE(a.batch_at({0, 0}).indices, a.batch_at({0, 1}).indices);
  EXPECT_NE(a.batch_at({0, 0}).indices, a.batch_at({1, 0}).indices);
  // Pinned: a change here changes every run's data order (and breaks resuming old checkpoints).
  EXPECT_EQ(a.batch_at({0, 0}).indices[0], 996244);
  EXPECT_EQ(a.batch_at({0, 0}).indices[1], 365342);
  EXPECT_EQ(a.batch_at({0, 0}).indices[2], 168550);
  EXPECT_EQ(a.window_start(5, 7), 832854);
  EXPECT_EQ(ds->decode(rows_of(a.batch_at({0, 0}).inputs, 0, 1, kContext)),
            " she is sweeter than perfume its");
  TextLoader again(ds, kContext, 16, 1, 0, 1);
  EXPECT_EQ(values(again.batch_at({4, 9}).inputs), values(a.batch_at({4, 9}).inputs));
}

// ---- the evaluation set ---------------------------------------------------------------------

TEST(TextData, EvalSetIsFixedAndDrawnFromValidation) {
  auto ds = shakespeare();
  TextEvalLoader eval(ds, kContext, 64);
  EXPECT_EQ(eval.windows(), 2400);
  EXPECT_EQ(eval.replicas(), 1);
  EXPECT_EQ(eval.steps_per_epoch(), 38);  // ceil(2400 / 64)
  std::vector<int64_t> starts;
  std::vector<int32_t> inputs;
  int64_t batches = 0;
  while (std::optional<Batch> b = eval.next()) {
    EXPECT_EQ(b->size(), batches == 37 ? 32 : 64);
    EXPECT_EQ(b->step_in_epoch, batches);
    starts.insert(starts.end(), b->indices.begin(), b->indices.end());
    const auto v = values(b->inputs);
    inputs.insert(inputs.end(), v.begin(), v.end());
    ++batches;
  }
  EXPECT_EQ(batches, 38);
  ASSERT_EQ(starts.size(), 2400u);
  for (size_t k = 0; k < starts.size(); ++k) {
    EXPECT_EQ(starts[k], eval.window_start(static_cast<int64_t>(k)));
    EXPECT_GE(starts[k], 1003854);
    EXPECT_LE(starts[k] + kContext + 1, 1115394);
  }
  // Another batch size, another window count and a second epoch: the same windows.
  TextEvalLoader other(ds, kContext, 7, 100);
  other.set_epoch(3);
  std::vector<int64_t> other_starts;
  std::vector<int32_t> other_inputs;
  while (std::optional<Batch> b = other.next()) {
    EXPECT_EQ(b->epoch, 3);
    other_starts.insert(other_starts.end(), b->indices.begin(), b->indices.end());
    const auto v = values(b->inputs);
    other_inputs.insert(other_inputs.end(), v.begin(), v.end());
  }
  EXPECT_EQ(other_starts, std::vector<int64_t>(starts.begin(), starts.begin() + 100));
  EXPECT_EQ(other_inputs, std::vector<int32_t>(inputs.begin(), inputs.begin() + 100 * kContext));
  // Pinned, like the training starts: the evaluation set of every past run.
  EXPECT_EQ(std::vector<int64_t>(starts.begin(), starts.begin() + 3),
            (std::vector<int64_t>{1051976, 1104732, 1079646}));
  EXPECT_THROW(eval.batch_at(38), std::out_of_range);
}

}  // namespace
}  // namespace tandem
