// tandem-bench-bf16: GFLOP/s of the GEMM shapes the MLP, the CNN and the GPT run, in f32
// (OpenBLAS sgemm) and in bf16 on both CPU paths (runtime/cpu/bf16_gemm.h): the native
// AVX512-BF16 kernel and the f32 fallback. Each figure is the best of 20 timed batches
// (each at least --min-ms / 20) after a warm-up: the best batch is the least disturbed by
// other processes on a shared machine. bf16 operands are prepared beforehand, as the
// layers keep them.
//   tandem-bench-bf16 [--threads N] [--min-ms MS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/kernels.h"

namespace {

using namespace tandem;

struct Shape3 {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
};

double best_gflops(int64_t flops, double min_ms, const std::function<void()>& f) {
  f();
  double best = 0;
  for (int rep = 0; rep < 20; ++rep) {
    int iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double ms = 0;
    do {
      f();
      ++iters;
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } while (ms < min_ms / 20);
    best = std::max(best, static_cast<double>(flops) * iters / (ms * 1e6));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  double min_ms = 500;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--min-ms" && i + 1 < argc) {
      min_ms = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tandem-bench-bf16 [--threads N] [--min-ms MS]\n");
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "tandem-bench-bf16: --threads must be >= 1\n");
    return 2;
  }
  set_cpu_threads(threads);
  const bool native = cpu::bf16_native_supported();
  std::printf("bf16 GEMM, GFLOP/s (best of 20 batches), %d thread%s; OpenBLAS kernels: %s; AVX512-BF16: %s\n", threads,
              threads == 1 ? "" : "s", cpu::blas_core_name().c_str(), native ? "yes" : "no");
  const Shape3 shapes[] = {
      {"mlp fc1 forward   x W^T", 128, 512, 784, false, true},
      {"mlp fc1 weight grad dy^T x", 512, 784, 128, true, false},
      {"mlp fc2 input grad dy W", 128, 512, 512, false, false},
      {"cnn conv2 forward W col", 64, 196, 288, false, false},
      {"cnn conv2 weight grad", 64, 288, 196, false, true},
      {"cnn conv2 col grad W^T dy", 288, 196, 64, true, false},
      {"cnn fc1 forward", 128, 48, 3136, false, true},
      {"gpt qkv forward (B*T=768)", 768, 384, 128, false, true},
      {"gpt mlp fc forward", 768, 512, 128, false, true},
      {"gpt mlp proj forward", 768, 128, 512, false, true},
      {"gpt mlp proj weight grad", 128, 512, 768, true, false},
      {"gpt lm head forward", 768, 65, 128, false, true},
      {"square 1024", 1024, 1024, 1024, false, false},
  };
  std::printf("%-30s %16s %9s %9s %9s %8s\n", "shape", "M x N x K", "f32", "native", "fallback", "nat/f32");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Kernels& k = cpu::kernels();
  for (const Shape3& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.M * s.K)), b(static_cast<size_t>(s.K * s.N)), c(static_cast<size_t>(s.M * s.N));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    k.f32_to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
    k.f32_to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
    const int64_t flops = 2 * s.M * s.N * s.K;
    const double f32 = best_gflops(flops, min_ms, [&] { k.gemm(c.data(), a.data(), b.data(), s.M, s.N, s.K, s.ta, s.tb, 1.f, 0.f); });
    const double nat = native ? best_gflops(flops, min_ms, [&] {
      cpu::gemm_bf16(cpu::Bf16GemmPath::native, c.data(), a16.data(), b16.data(), s.M, s.N, s.K, s.ta, s.tb, 1.f, 0.f);
    })
                              : 0;
    const double fb = best_gflops(flops, min_ms, [&] {
      cpu::gemm_bf16(cpu::Bf16GemmPath::fallback, c.data(), a16.data(), b16.data(), s.M, s.N, s.K, s.ta, s.tb, 1.f, 0.f);
    });
    char dims[40], nat_s[16] = "-", ratio[16] = "-";
    std::snprintf(dims, sizeof dims, "%lldx%lldx%lld %s%s", static_cast<long long>(s.M), static_cast<long long>(s.N),
                  static_cast<long long>(s.K), s.ta ? "T" : "N", s.tb ? "T" : "N");
    if (native) {
      std::snprintf(nat_s, sizeof nat_s, "%.1f", nat);
      std::snprintf(ratio, sizeof ratio, "%.2fx", nat / f32);
    }
    std::printf("%-30s %16s %9.1f %9s %9.1f %8s\n", s.what, dims, f32, nat_s, fb, ratio);
  }
  return 0;
}
