// GPT sampling and its checkpoint metadata.
#include "zoo/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "runtime/data/random.h"

namespace tandem {
namespace {

const char* kHex = "0123456789abcdef";

int64_t meta_int(const CheckpointMeta& meta, const std::string& key) {
  auto it = meta.extra.find(key);
  if (it == meta.extra.end())
    throw std::runtime_error("the checkpoint's meta.json has no '" + key + "' (was it written by --model gpt?)");
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(key);
    return v;
  } catch (const std::logic_error&) {
    throw std::runtime_error("the checkpoint's meta.json has '" + key + "' = '" + it->second + "', not an integer");
  }
}

}  // namespace

void save_gpt_meta(const GptConfig& config, const TextDataset& text, CheckpointMeta& meta) {
  meta.extra["gpt.n_layer"] = std::to_string(config.n_layer);
  meta.extra["gpt.n_head"] = std::to_string(config.n_head);
  meta.extra["gpt.n_embd"] = std::to_string(config.n_embd);
  meta.extra["gpt.context"] = std::to_string(config.context);
  meta.extra["gpt.vocab_size"] = std::to_string(config.vocab_size);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(config.dropout));
  meta.extra["gpt.dropout"] = buf;
  std::string hex;
  for (uint8_t b : text.vocab) hex += {kHex[b >> 4], kHex[b & 15]};
  meta.extra["text.vocab_hex"] = hex;
}

GptConfig gpt_config_from_meta(const CheckpointMeta& meta) {
  if (meta.model_name != "gpt")
    throw std::runtime_error("the checkpoint holds model '" + meta.model_name + "', not gpt");
  GptConfig c;
  c.n_layer = meta_int(meta, "gpt.n_layer");
  c.n_head = meta_int(meta, "gpt.n_head");
  c.n_embd = meta_int(meta, "gpt.n_embd");
  c.context = meta_int(meta, "gpt.context");
  c.vocab_size = meta_int(meta, "gpt.vocab_size");
  auto it = meta.extra.find("gpt.dropout");
  c.dropout = it == meta.extra.end() ? 0.f : std::stof(it->second);
  check_gpt_config(c);
  return c;
}

std::vector<uint8_t> vocab_from_meta(const CheckpointMeta& meta) {
  auto it = meta.extra.find("text.vocab_hex");
  if (it == meta.extra.end()) throw std::runtime_error("the checkpoint's meta.json has no 'text.vocab_hex'");
  const std::string& hex = it->second;
  auto nibble = [&](char ch) -> int {
    const char* p = std::find(kHex, kHex + 16, ch);
    if (p == kHex + 16) throw std::runtime_error("the checkpoint's 'text.vocab_hex' is not lowercase hex");
    return static_cast<int>(p - kHex);
  };
  if (hex.size() % 2 != 0) throw std::runtime_error("the checkpoint's 'text.vocab_hex' has an odd length");
  std::vector<uint8_t> vocab;
  for (size_t i = 0; i < hex.size(); i += 2) vocab.push_back(static_cast<uint8_t>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  if (static_cast<int64_t>(vocab.size()) != meta_int(meta, "gpt.vocab_size"))
    throw std::runtime_error("the checkpoint's vocabulary holds " + std::to_string(vocab.size()) +
                             " bytes but gpt.vocab_size says " + std::to_string(meta_int(meta, "gpt.vocab_size")));
  return vocab;
}

std::string sample_text(GptModel& model, const std::vector<uint8_t>& vocab, const SampleOptions& options) {
  const GptConfig& c = model.config();
  if (static_cast<int64_t>(vocab.size()) != c.vocab_size)
    throw std::invalid_argument("sample_text: a vocabulary of " + std::to_string(vocab.size()) + " for a model of " +
                                std::to_string(c.vocab_size));
  if (!(options.temperature > 0.f)) throw std::invalid_argument("sample_text: the temperature must be positive");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < options.prompt.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(options.prompt[i]);
    auto it = std::lower_bound(vocab.begin(), vocab.end(), byte);
    if (it == vocab.end() || *it != byte)
      throw std::invalid_argument("--prompt: byte " + std::to_string(byte) + " at position " + std::to_string(i) +
                                  " is not in the model's vocabulary");
    ids.push_back(static_cast<int32_t>(it - vocab.begin()));
  }
  if (ids.empty()) ids.push_back(0);
  model.set_training(false);
  data_random::SplitMix64 rng(data_random::hash2(options.seed, 0x5a3b1e));
  std::string out;
  std::vector<double> probs(vocab.size());
  for (int64_t n = 0; n < options.length; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), c.context);
    Tensor x = Tensor::empty({1, t}, DType::i32);
    std::copy(ids.end() - t, ids.end(), x.data<int32_t>());
    Tensor logits = model.forward(x.on(model.device()));  // (t, V)
    std::vector<float> last = logits.view((t - 1) * c.vocab_size, {c.vocab_size}).to_vector();
    const float top = *std::max_element(last.begin(), last.end());
    double total = 0;
    for (size_t v = 0; v < last.size(); ++v) total += probs[v] = std::exp((last[v] - top) / options.temperature);
    // Inverse CDF at a 53-bit uniform: a pure function of (seed, n) given the logits.
    double u = static_cast<double>(rng.next() >> 11) * (1.0 / 9007199254740992.0) * total;
    size_t pick = 0;
    while (pick + 1 < probs.size() && u >= probs[pick]) u -= probs[pick++];
    ids.push_back(static_cast<int32_t>(pick));
    out.push_back(static_cast<char>(vocab[pick]));
  }
  model.set_training(true);
  return out;
}

}  // namespace tandem
