#include "collectives/rounds.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "collectives/reduce_kernels.h"

namespace tandem {

size_t round_bytes_from_env() {
  const char* v = std::getenv("TANDEM_COLLECTIVE_CHUNK_KB");
  if (!v || !*v) return kRoundBytes;
  char* end = nullptr;
  errno = 0;
  const long long kb = std::strtoll(v, &end, 10);
  if (*end || kb <= 0 || errno == ERANGE || kb > (1LL << 30))
    throw std::invalid_argument(std::string("TANDEM_COLLECTIVE_CHUNK_KB must be a whole number of KiB from 1 to ") +
                                std::to_string(1LL << 30) + ", not '" + v + "'");
  return static_cast<size_t>(kb) << 10;
}

int64_t round_elements(size_t round_bytes, size_t elem, int64_t count, size_t max_bytes) {
  const size_t bytes = std::min(round_bytes, max_bytes);
  return std::min<int64_t>(count, std::max<int64_t>(1, static_cast<int64_t>(bytes / elem)));
}

void reduce_pieces_in_rank_order(DType dtype, ReduceOp op, void* dst, const uint8_t* staged, int size, int64_t n) {
  const size_t piece = static_cast<size_t>(n) * dtype_size(dtype);
  std::memcpy(dst, staged, piece);
  for (int r = 1; r < size; ++r) reduce_elements(dtype, op, dst, dst, staged + static_cast<size_t>(r) * piece, n);
}

}  // namespace tandem
