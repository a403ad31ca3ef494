// Names and small helpers for collectives/types.h.
#include "collectives/types.h"

#include <sstream>

namespace tandem {

Buffer Buffer::slice(int64_t first, int64_t n) const {
  if (first < 0 || n < 0 || first + n > count) {
    throw std::out_of_range("Buffer::slice: elements [" + std::to_string(first) + ", " +
                            std::to_string(first + n) + ") outside a buffer of " +
                            std::to_string(count));
  }
  Buffer b = *this;
  b.data = static_cast<char*>(data) + static_cast<size_t>(first) * dtype_size(dtype);
  b.count = n;
  return b;
}

Buffer cpu_buffer(float* data, int64_t count) { return {data, count, DType::f32, Device::cpu()}; }
Buffer cpu_buffer(int32_t* data, int64_t count) { return {data, count, DType::i32, Device::cpu()}; }
Buffer cpu_buffer(int64_t* data, int64_t count) { return {data, count, DType::i64, Device::cpu()}; }
Buffer cpu_buffer(uint8_t* data, int64_t count) { return {data, count, DType::u8, Device::cpu()}; }
Buffer cpu_buffer(uint16_t* data, int64_t count, DType half_dtype) {
  if (half_dtype != DType::f16 && half_dtype != DType::bf16) {
    throw std::invalid_argument("cpu_buffer(uint16_t*): dtype must be f16 or bf16, not " +
                                std::string(dtype_name(half_dtype)));
  }
  return {data, count, half_dtype, Device::cpu()};
}

const char* reduce_op_str(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "?";
}

const char* op_str(OpType op) {
  switch (op) {
    case OpType::allreduce: return "allreduce";
    case OpType::broadcast: return "broadcast";
    case OpType::allgather: return "allgather";
    case OpType::reduce_scatter: return "reduce_scatter";
    case OpType::barrier: return "barrier";
  }
  return "?";
}

std::string Collective::describe() const {
  std::ostringstream s;
  s << op_str(op) << " #" << seq;
  if (op == OpType::barrier) return s.str();
  s << " (" << dtype_name(dtype());
  if (op == OpType::allreduce || op == OpType::reduce_scatter) s << ' ' << reduce_op_str(reduce);
  if (op == OpType::broadcast) s << " root " << root;
  s << ", " << bytes() << " bytes" << (in_place ? ", in place" : "") << ')';
  return s.str();
}

}  // namespace tandem
