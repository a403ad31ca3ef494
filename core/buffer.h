// A typed run of memory: `count` elements of a DType on a Device. The one currency of
// the process group (collectives/) and of tensor storage handed to it (runtime/).
// Invariant: a Buffer always carries an element count and a dtype, never a bare byte
// count; bytes are derived (Buffer::bytes), so the two cannot be confused.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tandem/core/dtype.h"

namespace tandem {

// A contiguous run of `count` elements of `dtype` at `data` on `device`.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;  // elements, not bytes
  DType dtype = DType::f32;
  Device device = Device::cpu();

  size_t bytes() const { return static_cast<size_t>(count) * dtype_size(dtype); }
  // The `count` elements starting `first` elements in; throws std::out_of_range naming
  // both when they do not fit.
  Buffer slice(int64_t first, int64_t count) const;
};

// Typed constructors, so a call site cannot pass a byte count where elements are meant.
Buffer cpu_buffer(float* data, int64_t count);
Buffer cpu_buffer(int32_t* data, int64_t count);
Buffer cpu_buffer(int64_t* data, int64_t count);
Buffer cpu_buffer(uint8_t* data, int64_t count);
// f16 and bf16 share the 16-bit storage type, so their dtype must be named.
Buffer cpu_buffer(uint16_t* data, int64_t count, DType half_dtype);

}  // namespace tandem
