// Fuzz target: the safetensors reader (runtime/checkpoint/safetensors.h) on arbitrary bytes:
// the header's validation, then streaming the data with checksums, into CPU tensors.
// Contract checked: a header that validates describes tensors that tile the data section
// exactly, and reading it back never fails on the unchanged file.
#include <map>

#include "runtime/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  static fuzz::MemFile file("fuzz.safetensors");
  const std::string& path = file.write(data, size);
  SafetensorsHeader h;
  try {
    h = read_safetensors_header(path);
  } catch (const CheckpointError&) {
    return 0;
  }
  FUZZ_CHECK(h.file_bytes == size);
  uint64_t pos = 0;
  for (const SafetensorsEntry& e : h.tensors) {
    FUZZ_CHECK(e.begin == pos && e.end >= e.begin);
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      FUZZ_CHECK(d >= 0);
      FUZZ_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel));
    }
    FUZZ_CHECK(numel * dtype_size(e.dtype) == e.bytes());
    pos = e.end;
  }
  FUZZ_CHECK(h.data_start() + pos == size);
  // Every tensor into a CPU tensor of its own shape, as a checkpoint load does.
  std::map<std::string, Tensor> into;
  for (const SafetensorsEntry& e : h.tensors) into.emplace(e.name, Tensor::empty(e.shape, e.dtype));
  const SafetensorsChecksums sums = read_safetensors_data(path, h, &into);
  FUZZ_CHECK(sums.file_bytes == size);
  FUZZ_CHECK(sums.file_crc32 == crc32_of(std::string_view(reinterpret_cast<const char*>(data), size)));
  for (const SafetensorsEntry& e : h.tensors) {
    const Tensor& t = into.at(e.name);
    const std::string_view bytes(static_cast<const char*>(t.raw()), t.nbytes());
    FUZZ_CHECK(sums.tensor_crc32.at(e.name) == crc32_of(bytes));
  }
  return 0;
}
