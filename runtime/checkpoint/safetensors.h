// The safetensors file format (https://github.com/huggingface/safetensors), streamed:
//   8 bytes   N, little-endian u64: the length of the JSON header
//   N bytes   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//              "__metadata__": {"key": "string value", ...}}   padded with spaces so N % 8 == 0
//   the data  every tensor's raw little-endian bytes at [8 + N + begin, 8 + N + end)
// Tensors are written in name order, back to back, so the data section has no gap and no
// overlap (what the reference implementation requires of a file it reads).
//
// Invariants: writing streams each tensor from its own memory (CPU) or through one small
// reused host staging buffer (CUDA), so no second copy of a model exists at any time; the
// reader validates the whole header (sizes, dtypes, shapes, offsets in range, contiguous)
// before touching any data, and never trusts a length it has not checked against the file
// size, so arbitrary bytes give a CheckpointError naming the file, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/runtime/checkpoint/file_io.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// "F32", "F16", "BF16", "I32", "I64", "U8" (the safetensors spellings).
const char* safetensors_dtype(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // N (padding included)
  uint64_t file_bytes = 0;                // 8 + N + data section
  std::vector<SafetensorsEntry> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;

  uint64_t data_start() const { return 8 + header_bytes; }
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
};

// CRC-32 (zlib's polynomial) of one file, and of each tensor's data bytes.
struct SafetensorsChecksums {
  uint64_t file_bytes = 0;
  uint32_t file_crc32 = 0;
  std::map<std::string, uint32_t> tensor_crc32;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A file's worth: its tensors and its __metadata__.
struct TensorFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  bool empty() const { return tensors.empty() && metadata.empty(); }
};

// Creates `path` and writes the tensors (any device) in name order with `metadata`, then
// fsyncs and closes it. Checksums are computed from the very bytes written. Throws
// CheckpointError on an I/O failure, a duplicate or reserved name.
SafetensorsChecksums write_safetensors(const std::string& path, const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata);

// Reads and validates the header of `path`. Throws CheckpointError naming the file and the
// first problem (bad length, invalid JSON, unknown dtype, offsets out of range or overlapping,
// a data section of the wrong size).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Streams every tensor's bytes of a file whose header was read by read_safetensors_header,
// computing the checksums. Tensors named in `into` (same dtype and element count as the
// entry: the caller checked) also receive their bytes, on whatever device they live.
// Throws CheckpointError when the file changed size or cannot be read.
SafetensorsChecksums read_safetensors_data(const std::string& path, const SafetensorsHeader& header,
                                           const std::map<std::string, Tensor>* into = nullptr);

// CRC-32 of a byte string, and "%08x": how checksums are spelled in meta.json.
uint32_t crc32_of(std::string_view bytes);
std::string crc32_hex(uint32_t crc);

}  // namespace tandem
