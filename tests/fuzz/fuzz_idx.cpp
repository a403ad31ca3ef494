// Fuzz target: the IDX reader (runtime/data/idx.h), gzip or plain, on arbitrary bytes.
// Contract checked: read_idx either throws std::runtime_error or returns exactly the
// product of its dimensions in bytes.
#include <stdexcept>

#include "runtime/data/idx.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::MemFile file("fuzz.idx");
  const std::string& path = file.write(data, size);
  try {
    const tandem::IdxArray a = tandem::read_idx(path);
    FUZZ_CHECK(!a.dims.empty());
    uint64_t n = 1;
    for (int64_t d : a.dims) {
      FUZZ_CHECK(d >= 0);
      n *= static_cast<uint64_t>(d);
    }
    FUZZ_CHECK(a.data.size() == n);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
