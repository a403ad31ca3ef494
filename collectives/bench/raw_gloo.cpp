// The raw Gloo path: gloo::allreduce & co. called directly on the group's Gloo context
// from the benchmark's thread (the group's comm thread is idle: the harness drains it
// first). Reductions use Gloo's own sum where Gloo has one (f32, f16); bf16 has none.
#include <cstring>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/math.h>

#include "collectives/bench/bench_harness.h"
#include "collectives/gloo/process_group_gloo.h"
#include "collectives/reduce_kernels.h"

namespace tandem::bench {

namespace {

class RawGloo : public Path {
 public:
  explicit RawGloo(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}
  std::string name() const override { return "raw Gloo (gloo::* called directly, no Tandem layers)"; }

  std::shared_ptr<Work> issue(const Collective& c) override {
    // Tags from the top half of the space: never equal to a group op's (its seq).
    const uint32_t tag = 0x80000000u | (next_tag_++ & 0x7fffffffu);
    const size_t eb = dtype_size(c.dtype());
    switch (c.op) {
      case OpType::allreduce: {
        gloo::AllreduceOptions opts(context_);
        auto out = context_->createUnboundBuffer(c.out.data, c.out.bytes());
        if (!c.in_place) {
          std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in;
          in.push_back(context_->createUnboundBuffer(c.in.data, c.in.bytes()));
          set_inputs(opts, std::move(in), eb);
        }
        std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> outs;
        outs.push_back(std::move(out));
        set_outputs(opts, std::move(outs), eb);
        opts.setReduceFunction(reduce_function(c.dtype()));
        opts.setTag(tag);
        gloo::allreduce(opts);
        break;
      }
      case OpType::broadcast: {
        gloo::BroadcastOptions opts(context_);
        opts.setRoot(c.root);
        if (context_->rank == c.root && !c.in_place) {
          opts.setInput(static_cast<uint8_t*>(c.in.data), c.in.bytes());
        }
        opts.setOutput(static_cast<uint8_t*>(c.out.data), c.out.bytes());
        opts.setTag(tag);
        gloo::broadcast(opts);
        break;
      }
      case OpType::allgather: {
        gloo::AllgatherOptions opts(context_);
        if (!c.in_place) opts.setInput(static_cast<uint8_t*>(c.in.data), c.in.bytes());
        opts.setOutput(static_cast<uint8_t*>(c.out.data), c.out.bytes());
        opts.setTag(tag);
        gloo::allgather(opts);
        break;
      }
      case OpType::reduce_scatter: {
        // Gloo has no reduce-scatter function of its own that is safe to call (see
        // gloo_reduce_scatter): the raw row is alltoall plus the local reduction.
        gloo_reduce_scatter(context_, c.in.data, c.out.data, c.out.count, c.dtype(), c.reduce, tag,
                            context_->getTimeout());
        break;
      }
      case OpType::barrier: {
        gloo::BarrierOptions opts(context_);
        opts.setTag(tag);
        gloo::barrier(opts);
        break;
      }
    }
    return nullptr;
  }
  void drain(std::shared_ptr<Work>) override {}

 private:
  // AllreduceOptions is typed only through sizeof(T): pick a T of the element's size.
  static void set_inputs(gloo::AllreduceOptions& o, std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> b,
                         size_t eb) {
    if (eb == 4) o.setInputs<float>(std::move(b));
    else if (eb == 2) o.setInputs<uint16_t>(std::move(b));
    else if (eb == 8) o.setInputs<int64_t>(std::move(b));
    else o.setInputs<uint8_t>(std::move(b));
  }
  static void set_outputs(gloo::AllreduceOptions& o, std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> b,
                          size_t eb) {
    if (eb == 4) o.setOutputs<float>(std::move(b));
    else if (eb == 2) o.setOutputs<uint16_t>(std::move(b));
    else if (eb == 8) o.setOutputs<int64_t>(std::move(b));
    else o.setOutputs<uint8_t>(std::move(b));
  }
  using SumFn = void (*)(void*, const void*, const void*, size_t);
  static gloo::AllreduceOptions::Func reduce_function(DType dtype) {
    switch (dtype) {
      case DType::f32: return static_cast<SumFn>(&gloo::sum<float>);
      case DType::f16: return static_cast<SumFn>(&gloo::sum<gloo::float16>);
      case DType::i32: return static_cast<SumFn>(&gloo::sum<int32_t>);
      case DType::i64: return static_cast<SumFn>(&gloo::sum<int64_t>);
      case DType::u8: return static_cast<SumFn>(&gloo::sum<uint8_t>);
      case DType::bf16: break;
    }
    return [](void* out, const void* a, const void* b, size_t n) {
      reduce_elements(DType::bf16, ReduceOp::sum, out, a, b, static_cast<int64_t>(n));
    };
  }

  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;
};

}  // namespace

std::unique_ptr<Path> make_raw_gloo_path(ProcessGroup& group) {
  auto* gloo_group = dynamic_cast<ProcessGroupGloo*>(&group);
  if (!gloo_group) return nullptr;
  return std::make_unique<RawGloo>(gloo_group->gloo_context());
}

}  // namespace tandem::bench
