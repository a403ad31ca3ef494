// tandem-bench-attention: the GPT's causal self-attention alone on a CUDA device, forward
// and backward, through the Kernels interface (attention_forward, attention_backward), and
// again as the attention layer runs it under --precision bf16 (runtime/batched_attention.h
// with bf16 products), and the flash-style kernels (attention_forward_tiled /
// attention_backward_tiled, --attention tiled), so that scripts/gpu-check can attribute
// the GPT steps' time. Each figure is timed with the device's own marks (CUDA events, cudaEventElapsedTime: Kernels::mark / elapsed_ms),
// the mean and the best of --iters calls after a warm-up. Defaults: nanoGPT's GPU
// Shakespeare layer, B=64, T=256, C=384, NH=6.
//   tandem-bench-attention [--batch B] [--context T] [--n-embd C] [--n-head NH] [--iters N] [--device D]
// Exit 2 (after saying so) where no CUDA GPU is visible: there is nothing to time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/batched_attention.h"
#include "runtime/cuda_device.h"
#include "runtime/kernels.h"

namespace {

using namespace tandem;

// One device buffer of `count` floats, freed on scope exit.
class DeviceFloats {
 public:
  DeviceFloats(int64_t count, int device)
      : bytes_(static_cast<size_t>(count) * sizeof(float)),
        device_(device),
        ptr_(static_cast<float*>(cuda::alloc(bytes_, device))) {}
  ~DeviceFloats() { cuda::free(ptr_, bytes_, device_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return ptr_; }
  void upload(const std::vector<float>& host) const {
    cuda::copy(ptr_, Device::cuda(device_), host.data(), Device::cpu(), bytes_);
  }

 private:
  size_t bytes_;
  int device_;
  float* ptr_;
};

struct Timing {
  double mean_ms = 0, best_ms = 0;
};

// Runs `call` once untimed, then `iters` times, each between two marks on the device.
template <class Call>
Timing time_on_device(Kernels& k, int iters, Call call) {
  call();
  k.synchronize();
  Timing t;
  t.best_ms = 1e300;
  for (int i = 0; i < iters; ++i) {
    const std::shared_ptr<Kernels::TimeMark> from = k.mark();
    call();
    const std::shared_ptr<Kernels::TimeMark> to = k.mark();
    const double ms = k.elapsed_ms(*from, *to);
    t.mean_ms += ms / iters;
    t.best_ms = std::min(t.best_ms, ms);
  }
  return t;
}

// A positive integer, or 0 (after saying why) for anything else.
int64_t int_arg(const char* flag, const char* value) {
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (!value[0] || *end || v <= 0) {
    std::fprintf(stderr, "tandem-bench-attention: %s takes a positive integer, not '%s'\n", flag, value);
    return 0;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t b = 64, t = 256, c = 384, nh = 6, iters = 20, device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--batch" && has_value) {
      b = int_arg("--batch", argv[++i]);
    } else if (a == "--context" && has_value) {
      t = int_arg("--context", argv[++i]);
    } else if (a == "--n-embd" && has_value) {
      c = int_arg("--n-embd", argv[++i]);
    } else if (a == "--n-head" && has_value) {
      nh = int_arg("--n-head", argv[++i]);
    } else if (a == "--iters" && has_value) {
      iters = int_arg("--iters", argv[++i]);
    } else if (a == "--device" && has_value) {
      device = std::strtoll(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: tandem-bench-attention [--batch B] [--context T] [--n-embd C] [--n-head NH] [--iters N] "
                   "[--device D]\n");
      return 2;
    }
  }
  if (b == 0 || t == 0 || c == 0 || nh == 0 || iters == 0) return 2;
  if (c % nh != 0) {
    std::fprintf(stderr, "tandem-bench-attention: --n-head %lld must divide --n-embd %lld\n",
                 static_cast<long long>(nh), static_cast<long long>(c));
    return 2;
  }
  const int visible = cuda::device_count();
  if (visible == 0) {
    const std::string why = cuda::unavailable_reason();
    std::fprintf(stderr, "tandem-bench-attention: no CUDA GPU is visible%s%s%s: it times the CUDA kernels only, "
                 "nothing to do here\n", why.empty() ? "" : " (", why.c_str(), why.empty() ? "" : ")");
    return 2;
  }
  if (device < 0 || device >= visible) {
    std::fprintf(stderr, "tandem-bench-attention: --device %lld, but %d CUDA device(s) are visible\n",
                 static_cast<long long>(device), visible);
    return 2;
  }
  try {
    const int d = static_cast<int>(device);
    cuda::set_device(d);
    Kernels& k = cuda::kernels(d);
    const int64_t qkv_n = b * t * 3 * c, out_n = b * t * c, att_n = b * nh * t * t;
    DeviceFloats qkv(qkv_n, d), out(out_n, d), att(att_n, d);      // (B, T, 3C), (B, T, C), (B, NH, T, T)
    DeviceFloats dqkv(qkv_n, d), dout(out_n, d), datt(att_n, d);   // the same shapes
    std::mt19937 rng(1337);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> host(static_cast<size_t>(qkv_n));
    for (float& x : host) x = normal(rng);
    qkv.upload(host);
    host.resize(static_cast<size_t>(out_n));
    for (float& x : host) x = 0.01f * normal(rng);
    dout.upload(host);

    const Timing fwd = time_on_device(k, static_cast<int>(iters),
                                      [&] { k.attention_forward(out.get(), att.get(), qkv.get(), b, t, c, nh); });
    const Timing bwd = time_on_device(k, static_cast<int>(iters), [&] {
      k.attention_backward(dqkv.get(), datt.get(), dout.get(), qkv.get(), att.get(), b, t, c, nh);
    });
    // Under bf16 the layer runs the composition itself, on scratch of its own (as here).
    DeviceFloats scratch_fwd(
        static_cast<int64_t>(batched_attention_scratch(b, t, c, nh, false, Precision::bf16)), d);
    DeviceFloats scratch_bwd(static_cast<int64_t>(batched_attention_scratch(b, t, c, nh, true, Precision::bf16)),
                             d);
    const Timing fwd16 = time_on_device(k, static_cast<int>(iters), [&] {
      batched_attention_forward(k, out.get(), att.get(), qkv.get(), scratch_fwd.get(), b, t, c, nh, Precision::bf16);
    });
    const Timing bwd16 = time_on_device(k, static_cast<int>(iters), [&] {
      batched_attention_backward(k, dqkv.get(), datt.get(), dout.get(), qkv.get(), att.get(), scratch_bwd.get(), b,
                                 t, c, nh, Precision::bf16);
    });
    // Flash-style: a (B, NH, T) log-sum-exp instead of att, no datt.
    DeviceFloats lse(b * nh * t, d), out_tiled(out_n, d);
    const Timing fwd_tiled = time_on_device(k, static_cast<int>(iters), [&] {
      k.attention_forward_tiled(out_tiled.get(), lse.get(), qkv.get(), b, t, c, nh);
    });
    const Timing bwd_tiled = time_on_device(k, static_cast<int>(iters), [&] {
      k.attention_backward_tiled(dqkv.get(), dout.get(), qkv.get(), out_tiled.get(), lse.get(), b, t, c, nh);
    });
    // Both forwards once more from the same qkv: the largest difference of their outputs.
    k.attention_forward(out.get(), att.get(), qkv.get(), b, t, c, nh);
    k.attention_forward_tiled(out_tiled.get(), lse.get(), qkv.get(), b, t, c, nh);
    k.synchronize();
    std::vector<float> host_out(static_cast<size_t>(out_n)), host_tiled(static_cast<size_t>(out_n));
    cuda::copy(host_out.data(), Device::cpu(), out.get(), Device::cuda(d), host_out.size() * sizeof(float));
    cuda::copy(host_tiled.data(), Device::cpu(), out_tiled.get(), Device::cuda(d), host_tiled.size() * sizeof(float));
    double tiled_diff = 0;
    for (size_t i = 0; i < host_out.size(); ++i)
      tiled_diff = std::max(tiled_diff, static_cast<double>(std::abs(host_out[i] - host_tiled[i])));

    const double att_mib = static_cast<double>(att_n) * sizeof(float) / (1024.0 * 1024.0);
    std::printf("attention on %s, B=%lld T=%lld C=%lld NH=%lld, %lld timed calls each (CUDA events)\n",
                cuda::device_name(d).c_str(), static_cast<long long>(b), static_cast<long long>(t),
                static_cast<long long>(c), static_cast<long long>(nh), static_cast<long long>(iters));
    std::printf("%-10s %10s %10s\n", "pass", "mean ms", "best ms");
    std::printf("%-10s %10.3f %10.3f\n", "forward", fwd.mean_ms, fwd.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "backward", bwd.mean_ms, bwd.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "both", fwd.mean_ms + bwd.mean_ms, fwd.best_ms + bwd.best_ms);
    std::printf("bf16 products (--precision bf16):\n");
    std::printf("%-10s %10.3f %10.3f\n", "forward", fwd16.mean_ms, fwd16.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "backward", bwd16.mean_ms, bwd16.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "both", fwd16.mean_ms + bwd16.mean_ms, fwd16.best_ms + bwd16.best_ms);
    std::printf("tiled (--attention tiled, fp32):\n");
    std::printf("%-10s %10.3f %10.3f\n", "forward", fwd_tiled.mean_ms, fwd_tiled.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "backward", bwd_tiled.mean_ms, bwd_tiled.best_ms);
    std::printf("%-10s %10.3f %10.3f\n", "both", fwd_tiled.mean_ms + bwd_tiled.mean_ms,
                fwd_tiled.best_ms + bwd_tiled.best_ms);
    std::printf("tiled out vs materialized out: max |difference| %.3g\n", tiled_diff);
    std::printf("per layer: att (B, NH, T, T) %.1f MiB, its gradient scratch datt %.1f MiB; tiled: lse (B, NH, T) "
                "%.3f MiB\n",
                att_mib, att_mib, static_cast<double>(b * nh * t) * sizeof(float) / (1024.0 * 1024.0));
    // One JSON line for scripts/gpu-check's report.
    std::printf("{\"bench\":\"attention\",\"batch\":%lld,\"context\":%lld,\"n_embd\":%lld,\"n_head\":%lld,"
                "\"iters\":%lld,\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"forward_best_ms\":%.4f,"
                "\"backward_best_ms\":%.4f,\"bf16_forward_ms\":%.4f,\"bf16_backward_ms\":%.4f,"
                "\"tiled_forward_ms\":%.4f,\"tiled_backward_ms\":%.4f,\"tiled_max_abs_diff\":%.3g,"
                "\"att_mib\":%.2f}\n",
                static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(c),
                static_cast<long long>(nh), static_cast<long long>(iters), fwd.mean_ms, bwd.mean_ms, fwd.best_ms,
                bwd.best_ms, fwd16.mean_ms, bwd16.mean_ms, fwd_tiled.mean_ms, bwd_tiled.mean_ms, tiled_diff, att_mib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench-attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
