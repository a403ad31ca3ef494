// Fuzz target: the meta.json parser (runtime/checkpoint/checkpoint_meta.h) on arbitrary text.
// The input is parsed as it is, and, when it is a JSON object, once more with "meta_crc32"
// recomputed, so mutations reach the field checks behind the checksum. Contract checked: the
// parser throws CheckpointError or returns a meta that writes back to a meta.json which
// parses to the same text again; a parsed meta converts its loader position for any run.
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_meta.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void parse_and_check(const std::string& text) {
  using namespace tandem;
  CheckpointMeta m;
  try {
    m = checkpoint_meta_from_json(text, "meta.json");
  } catch (const CheckpointError&) {
    return;
  }
  const std::string again = checkpoint_meta_to_json(m);
  const CheckpointMeta m2 = checkpoint_meta_from_json(again, "meta.json (written back)");
  FUZZ_CHECK(checkpoint_meta_to_json(m2) == again);
  FUZZ_CHECK(m2.step == m.step && m2.epoch == m.epoch && m2.step_in_epoch == m.step_in_epoch);
  // What a resumed run with another batch size or world size asks of it.
  for (const auto& [batch, replicas] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {128, 8}, {m.batch_size, m.replicas}}) {
    if (batch < 1 || replicas < 1) continue;
    try {
      const LoaderPosition p = m.position_for(batch, replicas);
      FUZZ_CHECK(p.epoch == m.epoch && p.step_in_epoch >= 0);
    } catch (const CheckpointError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse_and_check(text);
  // The same with a correct checksum (how save_checkpoint computes it: the compact dump
  // with sorted keys of everything else).
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    j.erase("meta_crc32");
    std::string dump;
    try {
      dump = j.dump();
    } catch (const nlohmann::json::exception&) {  // a string that is not UTF-8
      return 0;
    }
    j["meta_crc32"] = tandem::crc32_hex(tandem::crc32_of(dump));
    parse_and_check(j.dump());
  }
  return 0;
}
