// Sampling text from a trained GPT (tandem-train --model gpt --resume PATH --sample N), and
// the part of a checkpoint's meta.json that makes it possible without the training flags:
// the model's shape ("gpt.*") and the vocabulary ("text.vocab_hex", one byte per token).
// Invariant: the same checkpoint, prompt, seed and temperature print the same text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/zoo/gpt.h"
#include "tandem/runtime/checkpoint/checkpoint_meta.h"
#include "tandem/runtime/data/text.h"

namespace tandem {

void save_gpt_meta(const GptConfig& config, const TextDataset& text, CheckpointMeta& meta);
// Throws std::runtime_error naming the missing or malformed key (a checkpoint of another
// model, or written before GPT landed).
GptConfig gpt_config_from_meta(const CheckpointMeta& meta);
std::vector<uint8_t> vocab_from_meta(const CheckpointMeta& meta);

struct SampleOptions {
  int64_t length = 300;       // tokens to generate
  float temperature = 1.0f;   // softmax(logits / temperature)
  uint64_t seed = 0;
  std::string prompt = "\n";  // every byte must be in the vocabulary
};

// Continues the prompt one token at a time: the last `context` tokens in, the next token
// drawn from the last position's softmax. Returns the generated text (without the prompt).
// Throws std::invalid_argument naming a prompt byte outside the vocabulary.
std::string sample_text(GptModel& model, const std::vector<uint8_t>& vocab, const SampleOptions& options);

}  // namespace tandem
