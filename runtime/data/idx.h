// Reader for IDX files (the MNIST / Fashion-MNIST container), gzip-compressed or plain.
// Invariant: a returned IdxArray is exactly what the header promises — data.size() equals the
// product of dims — or read_idx threw a std::runtime_error naming the file and what is wrong.
//
// Format: magic = 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 sizes, then the data,
// row-major. Only type 0x08 (unsigned byte) is supported: it is all that (Fashion-)MNIST uses.
// Trailing bytes after the data are an ERROR: a correct IDX file has none, so extra bytes mean a
// wrong or damaged file (e.g. a header for fewer items than the data holds), which we refuse
// rather than silently train on part of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

enum class IdxType : uint8_t { u8 = 0x08 };

struct IdxArray {
  std::string path;            // where it was read from (for later error messages)
  IdxType type = IdxType::u8;
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;   // product(dims) elements, row-major
};

// Reads a whole IDX file; gzip is detected by zlib (plain files read as they are).
IdxArray read_idx(const std::string& path);

}  // namespace tandem
