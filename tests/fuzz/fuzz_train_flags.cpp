// Fuzz target: tandem-train's flag parsing (train/train_config.h). The input is the command
// line after "tandem-train", one argument per line (or NUL-separated). Contract checked:
// parse_train_args throws UsageError, returns nullopt (--help, --version), or returns a
// config whose values the trainer can use as they are: the ranges parse_train_args checks,
// and the conversions the trainer makes (seconds to milliseconds, MB to bytes) defined.
#include <cmath>
#include <cstdint>

#include "train/train_config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tandem::fuzz::silence_stdout();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  fuzz::Argv args("tandem-train", data, size);
  std::optional<TrainConfig> c;
  try {
    c = parse_train_args(args.argc(), args.argv());
  } catch (const UsageError&) {
    return 0;
  }
  if (!c) return 0;
  FUZZ_CHECK(c->hidden > 0 && c->epochs > 0 && c->batch_size > 0 && c->grad_accum > 0);
  FUZZ_CHECK(c->max_steps >= 0 && c->save_every >= 0 && c->eval_every >= 0 && c->log_every > 0);
  FUZZ_CHECK(c->devices > 0 && c->threads >= 0 && c->keep_last >= 0);
  FUZZ_CHECK(c->lr > 0 && c->min_lr >= 0 && c->min_lr <= c->lr);
  FUZZ_CHECK(c->momentum >= 0 && c->momentum < 1 && c->weight_decay >= 0 && c->clip_grad_norm >= 0);
  FUZZ_CHECK(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1);
  FUZZ_CHECK(c->mode == Mode::dp || c->devices == 1);
  if (c->model == "gpt") {
    FUZZ_CHECK(c->n_layer > 0 && c->n_head > 0 && c->n_embd > 0 && c->context > 0);
    FUZZ_CHECK(c->n_embd % c->n_head == 0);
    FUZZ_CHECK(c->dropout >= 0 && c->dropout < 1 && c->temperature > 0 && c->sample >= 0);
  }
  // train/trainer.cpp: milliseconds(int64_t(collective_timeout_s * 1000)), and
  // runtime/strategy/parallel.cpp: size_t(bucket_cap_mb * 1024 * 1024).
  FUZZ_CHECK(std::isfinite(c->collective_timeout_s) && c->collective_timeout_s > 0 &&
             c->collective_timeout_s * 1000 < 9.2e18);
  FUZZ_CHECK(std::isfinite(c->bucket_cap_mb) && c->bucket_cap_mb > 0 &&
             c->bucket_cap_mb * 1024 * 1024 < 1.8e19);
  return 0;
}
