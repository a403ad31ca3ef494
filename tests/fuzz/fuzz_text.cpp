// Fuzz target: the text data loader (runtime/data/text.h). The first 8 bytes choose the
// loader's settings (context, batch size, replicas, rank, seed, evaluation windows, the
// step), the rest is the text file. Contract checked: load_text throws std::runtime_error
// or gives a dataset whose splits each hold a window; every batch of the training and
// evaluation loaders holds in-range tokens, labels one token after the inputs, windows
// inside their split; decode(encode(x)) == x.
#include <cstring>
#include <stdexcept>

#include "runtime/data/text.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void check_batch(const tandem::TextDataset& ds, const tandem::Batch& b, int64_t context,
                 int64_t lo, int64_t hi) {
  const int64_t rows = static_cast<int64_t>(b.indices.size());
  FUZZ_CHECK(b.inputs.numel() == rows * context && b.labels.numel() == rows * context);
  const int32_t* in = b.inputs.data<int32_t>();
  const int32_t* lab = b.labels.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = b.indices[static_cast<size_t>(r)];
    FUZZ_CHECK(s >= lo && s + context + 1 <= hi);
    for (int64_t t = 0; t < context; ++t) {
      FUZZ_CHECK(in[r * context + t] >= 0 && in[r * context + t] < ds.vocab_size());
      FUZZ_CHECK(in[r * context + t] == ds.tokens[static_cast<size_t>(s + t)]);
      FUZZ_CHECK(lab[r * context + t] == ds.tokens[static_cast<size_t>(s + t + 1)]);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size < 8) return 0;
  const int64_t context = 1 + data[0] % 64;
  const int64_t batch = 1 + data[1] % 8;
  const int64_t replicas = 1 + data[2] % 4;
  const int64_t rank = data[3] % replicas;
  const uint64_t seed = data[4];
  const int64_t windows = 1 + data[5] % 16;
  const int64_t step = data[6] % 4;
  const bool check_sha = data[7] & 1;
  static fuzz::MemFile file("fuzz.txt");
  const std::string& path = file.write(data + 8, size - 8);

  auto ds = std::make_shared<TextDataset>();
  try {
    *ds = load_text(path, "fuzz", check_sha ? std::optional<std::string>(kShakespeareSha256) : std::nullopt,
                    context);
  } catch (const std::runtime_error&) {
    return 0;
  }
  FUZZ_CHECK(ds->size() == static_cast<int64_t>(size - 8));
  FUZZ_CHECK(ds->train_tokens >= context + 1 && ds->val_tokens() >= context + 1);
  const std::string text(reinterpret_cast<const char*>(data + 8), size - 8);
  FUZZ_CHECK(ds->decode(ds->encode(text)) == text);

  TextLoader train(ds, context, batch, replicas, rank, seed);
  const int64_t steps = train.steps_per_epoch();
  FUZZ_CHECK(steps >= 1);
  train.seek({static_cast<int64_t>(step), std::min<int64_t>(step, steps - 1)});
  for (int i = 0; i < 2; ++i) {
    std::optional<Batch> b = train.next();
    if (!b) break;
    FUZZ_CHECK(static_cast<int64_t>(b->indices.size()) == batch);
    check_batch(*ds, *b, context, 0, ds->train_tokens);
  }
  TextEvalLoader eval(ds, context, batch, windows);
  for (std::optional<Batch> b = eval.next(); b; b = eval.next())
    check_batch(*ds, *b, context, ds->train_tokens, ds->size());
  return 0;
}
