// Names and small helpers for collectives/types.h.
#include "collectives/types.h"

#include <sstream>

namespace tandem {

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
