// An emulated CUDA device for tests: runtime/cuda_device.h implemented on host memory and
// the CPU kernels, linked into tandem-train-emulated in place of the real device.
//
// What it covers: every device-agnostic branch on Device::is_cuda() (the trainer's
// --device cuda handling, LOCAL_RANK to GPU, DataParallel over several devices, DDP
// staging GPU buckets through pinned host memory for mpi and gloo, checkpoints written
// from and loaded onto a device, the summary's device figures) runs in CI, on real
// processes, with results that must equal the CPU's bit for bit.
// What it cannot cover: CUDA itself (streams, events, kernels, NCCL): tests/gpu and
// scripts/gpu-check do, on a GPU.
//
// Device pointers are host addresses moved by kTag into the non-canonical half of the
// x86-64 address space: host code that dereferences one faults at once, as it would on
// a GPU, while pointer arithmetic (views, buckets) works as usual. Only the emulated
// kernels (EmulatedKernels) and copies move them back. Every block handed out is filled
// with NaN bytes, so a read of memory nothing wrote shows too. Released blocks are
// cached by exact size, so the memory figures behave like the real caching allocator's
// (no new blocks once a training loop is warm).
//
// TANDEM_EMULATED_GPUS sets the device count (default 2; 0 acts as a machine without GPUs).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/batched_attention.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cuda_device.h"

namespace tandem::cuda {

namespace {

constexpr uintptr_t kTag = uintptr_t{1} << 62;

template <class T>
T* device_ptr(T* host) {
  return host ? reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(host) + kTag) : nullptr;
}

template <class T>
T* host_ptr(T* device) {
  return device ? reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(device) - kTag) : nullptr;
}

// Device memory for one call, released when it returns (the emulated device has no
// stream to order it behind).
class DeviceScratch {
 public:
  DeviceScratch(size_t bytes, int device) : bytes_(bytes), device_(device), ptr_(alloc(bytes, device)) {}
  ~DeviceScratch() { free(ptr_, bytes_, device_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  float* f32() const { return static_cast<float*>(ptr_); }

 private:
  size_t bytes_;
  int device_;
  void* ptr_;
};

// The CPU kernels behind the device's pointers: each call moves its pointers back.
// Each call also counts the kernel launches cuda/ makes for it (a cuBLAS or CUB
// call as one; the two-pass reductions as two; layernorm_backward and the embedding's
// sorted backward as three), so docs/gpu.md's
// launches per step come from the code's real call sequence (TANDEM_EMULATED_LAUNCHES=1
// prints them at exit). attention_* count through their pieces.
class EmulatedKernels final : public Kernels {
 public:
  explicit EmulatedKernels(int device) : device_(device) {}
  int64_t launches() const { return launches_.load(); }
  Device device() const override { return Device::cuda(device_); }

  void gemm(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
            float alpha, float beta) override {
    launched();
    cpu_.gemm(host_ptr(C), host_ptr(A), host_ptr(B), M, N, K, ta, tb, alpha, beta);
  }
  void gemm_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                 float alpha, float beta) override {
    launched();
    cpu_.gemm_bf16(host_ptr(C), host_ptr(A), host_ptr(B), M, N, K, ta, tb, alpha, beta);
  }
  void fill(float* x, int64_t n, float v) override { launched(); cpu_.fill(host_ptr(x), n, v); }
  void copy(float* d, const float* s, int64_t n) override { launched(); cpu_.copy(host_ptr(d), host_ptr(s), n); }
  void scale(float* x, int64_t n, float a) override { launched(); cpu_.scale(host_ptr(x), n, a); }
  void axpy(float* y, const float* x, int64_t n, float a) override {
    launched();
    cpu_.axpy(host_ptr(y), host_ptr(x), n, a);
  }
  void add_bias_rows(float* y, const float* b, int64_t r, int64_t c) override {
    launched();
    cpu_.add_bias_rows(host_ptr(y), host_ptr(b), r, c);
  }
  void sum_rows_acc(float* o, const float* x, int64_t r, int64_t c) override {
    launched(2);
    cpu_.sum_rows_acc(host_ptr(o), host_ptr(x), r, c);
  }
  void add_bias_channels(float* y, const float* b, int64_t n, int64_t c, int64_t hw) override {
    launched();
    cpu_.add_bias_channels(host_ptr(y), host_ptr(b), n, c, hw);
  }
  void sum_channels_acc(float* o, const float* x, int64_t n, int64_t c, int64_t hw) override {
    launched(2);
    cpu_.sum_channels_acc(host_ptr(o), host_ptr(x), n, c, hw);
  }
  void relu_forward(float* y, const float* x, int64_t n) override {
    launched();
    cpu_.relu_forward(host_ptr(y), host_ptr(x), n);
  }
  void relu_backward(float* dx, const float* dy, const float* y, int64_t n) override {
    launched();
    cpu_.relu_backward(host_ptr(dx), host_ptr(dy), host_ptr(y), n);
  }
  void gelu_forward(float* y, const float* x, int64_t n) override {
    launched();
    cpu_.gelu_forward(host_ptr(y), host_ptr(x), n);
  }
  void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) override {
    launched();
    cpu_.gelu_backward(host_ptr(dx), host_ptr(dy), host_ptr(x), n);
  }
  void dropout_forward(float* y, float* mask, const float* x, int64_t n, float p, uint64_t seed) override {
    launched();
    cpu_.dropout_forward(host_ptr(y), host_ptr(mask), host_ptr(x), n, p, seed);
  }
  void mul(float* y, const float* a, const float* b, int64_t n) override {
    launched();
    cpu_.mul(host_ptr(y), host_ptr(a), host_ptr(b), n);
  }
  void im2col_batched(float* col, const float* img, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                      int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) override {
    launched();
    cpu_.im2col_batched(host_ptr(col), host_ptr(img), n, c, h, w, kh, kw, stride, pad, oh, ow);
  }
  void col2im_batched_acc(float* img, const float* col, int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                          int64_t kw, int64_t stride, int64_t pad, int64_t oh, int64_t ow) override {
    launched();
    cpu_.col2im_batched_acc(host_ptr(img), host_ptr(col), n, c, h, w, kh, kw, stride, pad, oh, ow);
  }
  void swap_leading(float* d, const float* s, int64_t a, int64_t b, int64_t inner) override {
    launched();
    cpu_.swap_leading(host_ptr(d), host_ptr(s), a, b, inner);
  }
  void maxpool_forward(float* y, int32_t* arg, const float* x, int64_t planes, int64_t h, int64_t w, int64_t k,
                       int64_t stride, int64_t oh, int64_t ow) override {
    launched();
    cpu_.maxpool_forward(host_ptr(y), host_ptr(arg), host_ptr(x), planes, h, w, k, stride, oh, ow);
  }
  void maxpool_backward(float* dx, const float* dy, const int32_t* arg, int64_t planes, int64_t h, int64_t w,
                        int64_t oh, int64_t ow) override {
    launched();
    cpu_.maxpool_backward(host_ptr(dx), host_ptr(dy), host_ptr(arg), planes, h, w, oh, ow);
  }
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g, const float* b,
                         int64_t rows, int64_t cols, float eps) override {
    launched();
    cpu_.layernorm_forward(host_ptr(y), host_ptr(mean), host_ptr(rstd), host_ptr(x), host_ptr(g), host_ptr(b), rows,
                           cols, eps);
  }
  void layernorm_backward(float* dx, float* dg, float* db, const float* dy, const float* x, const float* g,
                          const float* mean, const float* rstd, int64_t rows, int64_t cols) override {
    launched(3);
    cpu_.layernorm_backward(host_ptr(dx), host_ptr(dg), host_ptr(db), host_ptr(dy), host_ptr(x), host_ptr(g),
                            host_ptr(mean), host_ptr(rstd), rows, cols);
  }
  void batchnorm_stats(float* stats, const float* x, int64_t n, int64_t c, int64_t s) override {
    launched(2);
    cpu_.batchnorm_stats(host_ptr(stats), host_ptr(x), n, c, s);
  }
  void batchnorm_train_moments(float* mean, float* invstd, float* rm, float* rv, int64_t* nbt, const float* stats,
                               int64_t c, float eps, float momentum) override {
    launched();
    cpu_.batchnorm_train_moments(host_ptr(mean), host_ptr(invstd), host_ptr(rm), host_ptr(rv), host_ptr(nbt),
                                 host_ptr(stats), c, eps, momentum);
  }
  void batchnorm_eval_invstd(float* invstd, const float* rv, int64_t c, float eps) override {
    launched();
    cpu_.batchnorm_eval_invstd(host_ptr(invstd), host_ptr(rv), c, eps);
  }
  void batchnorm_forward(float* y, const float* x, const float* mean, const float* invstd, const float* w,
                         const float* b, int64_t n, int64_t c, int64_t s) override {
    launched();
    cpu_.batchnorm_forward(host_ptr(y), host_ptr(x), host_ptr(mean), host_ptr(invstd), host_ptr(w), host_ptr(b), n, c,
                           s);
  }
  void batchnorm_backward_sums(float* sums, const float* dy, const float* x, const float* mean, const float* invstd,
                               int64_t n, int64_t c, int64_t s) override {
    launched(2);
    cpu_.batchnorm_backward_sums(host_ptr(sums), host_ptr(dy), host_ptr(x), host_ptr(mean), host_ptr(invstd), n, c,
                                 s);
  }
  void batchnorm_backward_dx(float* dx, const float* dy, const float* x, const float* mean, const float* invstd,
                             const float* w, const float* sums, const float* count, int64_t n, int64_t c,
                             int64_t s) override {
    launched();
    cpu_.batchnorm_backward_dx(host_ptr(dx), host_ptr(dy), host_ptr(x), host_ptr(mean), host_ptr(invstd),
                               host_ptr(w), host_ptr(sums), host_ptr(count), n, c, s);
  }
  void softmax_xent_forward(float* probs, float* losses, const float* logits, const int32_t* labels, int64_t rows,
                            int64_t classes) override {
    launched();
    cpu_.softmax_xent_forward(host_ptr(probs), host_ptr(losses), host_ptr(logits), host_ptr(labels), rows, classes);
  }
  void softmax_xent_backward(float* dl, const float* probs, const int32_t* labels, int64_t rows, int64_t classes,
                             float scale) override {
    launched();
    cpu_.softmax_xent_backward(host_ptr(dl), host_ptr(probs), host_ptr(labels), rows, classes, scale);
  }
  void mse_forward(float* losses, const float* pred, const float* target, int64_t rows, int64_t cols) override {
    launched();
    cpu_.mse_forward(host_ptr(losses), host_ptr(pred), host_ptr(target), rows, cols);
  }
  void mse_backward(float* dpred, const float* pred, const float* target, int64_t rows, int64_t cols,
                    float scale) override {
    launched();
    cpu_.mse_backward(host_ptr(dpred), host_ptr(pred), host_ptr(target), rows, cols, scale);
  }
  void bce_logits_forward(float* losses, const float* logits, const float* target, int64_t rows,
                          int64_t cols) override {
    launched();
    cpu_.bce_logits_forward(host_ptr(losses), host_ptr(logits), host_ptr(target), rows, cols);
  }
  void bce_logits_backward(float* dl, const float* logits, const float* target, int64_t rows, int64_t cols,
                           float scale) override {
    launched();
    cpu_.bce_logits_backward(host_ptr(dl), host_ptr(logits), host_ptr(target), rows, cols, scale);
  }
  int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes) override {
    launched();
    return cpu_.count_correct(host_ptr(logits), host_ptr(labels), rows, classes);
  }
  double sum(const float* x, int64_t n) override { launched(2); return cpu_.sum(host_ptr(x), n); }
  void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n, int64_t c) override {
    launched();
    cpu_.embedding_forward(host_ptr(out), host_ptr(table), host_ptr(ids), n, c);
  }
  void embedding_backward_acc(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t c,
                              int64_t vocab) override {
    launched(3);
    cpu_.embedding_backward_acc(host_ptr(dtable), host_ptr(dout), host_ptr(ids), n, c, vocab);
  }
  // A GPU's attention: the batched composition over this device's primitives below, on
  // scratch from this device, so CI runs the steps cuda/ runs.
  void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                         int64_t nh) override {
    DeviceScratch scratch(batched_attention_scratch(b, t, c, nh, false) * sizeof(float), device_);
    batched_attention_forward(*this, out, att, qkv, scratch.f32(), b, t, c, nh);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int64_t b,
                          int64_t t, int64_t c, int64_t nh) override {
    DeviceScratch scratch(batched_attention_scratch(b, t, c, nh, true) * sizeof(float), device_);
    batched_attention_backward(*this, dqkv, datt, dout, qkv, att, scratch.f32(), b, t, c, nh);
  }
  // The tiled kernels are transformer.cu's own launches (1 forward; delta, dq, dk/dv
  // backward), run as the CPU's tiled algorithm: the emulated GPU's tiled GPT is the CPU's.
  void attention_forward_tiled(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t c,
                               int64_t nh) override {
    launched();
    cpu_.attention_forward_tiled(host_ptr(out), host_ptr(lse), host_ptr(qkv), b, t, c, nh);
  }
  void attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                int64_t b, int64_t t, int64_t c, int64_t nh) override {
    launched(3);
    cpu_.attention_backward_tiled(host_ptr(dqkv), host_ptr(dout), host_ptr(qkv), host_ptr(out), host_ptr(lse), b, t,
                                  c, nh);
  }
  void gemm_strided_batched(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool ta,
                            bool tb, float alpha, float beta, int64_t batch, int64_t sa, int64_t sb,
                            int64_t sc) override {
    launched();
    cpu_.gemm_strided_batched(host_ptr(C), host_ptr(A), host_ptr(B), M, N, K, ta, tb, alpha, beta, batch, sa, sb, sc);
  }
  void gemm_strided_batched_bf16(float* C, const uint16_t* A, const uint16_t* B, int64_t M, int64_t N, int64_t K,
                                 bool ta, bool tb, float alpha, float beta, int64_t batch, int64_t sa, int64_t sb,
                                 int64_t sc) override {
    launched();
    cpu_.gemm_strided_batched_bf16(host_ptr(C), host_ptr(A), host_ptr(B), M, N, K, ta, tb, alpha, beta, batch, sa, sb,
                                   sc);
  }
  void split_heads(float* heads, const float* x, int64_t parts, int64_t b, int64_t t, int64_t c,
                   int64_t nh) override {
    launched();
    cpu_.split_heads(host_ptr(heads), host_ptr(x), parts, b, t, c, nh);
  }
  void merge_heads(float* x, const float* heads, int64_t parts, int64_t b, int64_t t, int64_t c,
                   int64_t nh) override {
    launched();
    cpu_.merge_heads(host_ptr(x), host_ptr(heads), parts, b, t, c, nh);
  }
  void causal_softmax_forward(float* att, int64_t rows, int64_t t) override {
    launched();
    cpu_.causal_softmax_forward(host_ptr(att), rows, t);
  }
  void causal_softmax_backward(float* datt, const float* att, int64_t rows, int64_t t) override {
    launched();
    cpu_.causal_softmax_backward(host_ptr(datt), host_ptr(att), rows, t);
  }
  void gelu_tanh_forward(float* y, const float* x, int64_t n) override {
    launched();
    cpu_.gelu_tanh_forward(host_ptr(y), host_ptr(x), n);
  }
  void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) override {
    launched();
    cpu_.gelu_tanh_backward(host_ptr(dx), host_ptr(dy), host_ptr(x), n);
  }
  void sum_squares_acc(double* out, const float* x, int64_t n) override {
    launched(2);
    cpu_.sum_squares_acc(host_ptr(out), host_ptr(x), n);
  }
  void clip_scale(float* x, int64_t n, const double* sum_sq, int64_t parts, float max_norm) override {
    launched();
    cpu_.clip_scale(host_ptr(x), n, host_ptr(sum_sq), parts, max_norm);
  }
  void sgd_update(float* p, float* buf, const float* g, int64_t n, float lr, float momentum, float wd, bool nesterov,
                  bool first) override {
    launched();
    cpu_.sgd_update(host_ptr(p), host_ptr(buf), host_ptr(g), n, lr, momentum, wd, nesterov, first);
  }
  void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, float lr, float b1, float b2, float eps,
                    float wd, int64_t step) override {
    launched();
    cpu_.adamw_update(host_ptr(p), host_ptr(m), host_ptr(v), host_ptr(g), n, lr, b1, b2, eps, wd, step);
  }
  // The multi-tensor calls: the CPU's (a loop over the single-tensor kernels, so the same
  // bits) on host pointers, counted as CUDA's one launch per kMultiTensorChunk tensors.
  void sum_squares_acc_multi(double* out, const Span* xs, int64_t count) override {
    launched(2 * chunks(count));
    const std::vector<Span> host = on_host(xs, count);
    cpu_.sum_squares_acc_multi(host_ptr(out), host.data(), count);
  }
  void clip_scale_multi(const Span* xs, int64_t count, const double* sum_sq, int64_t parts, float max_norm) override {
    launched(chunks(count));
    const std::vector<Span> host = on_host(xs, count);
    cpu_.clip_scale_multi(host.data(), count, host_ptr(sum_sq), parts, max_norm);
  }
  void sgd_update_multi(const UpdateSpan* ts, int64_t count, float lr, float momentum, bool nesterov,
                        bool first) override {
    launched(chunks(count));
    const std::vector<UpdateSpan> host = on_host(ts, count);
    cpu_.sgd_update_multi(host.data(), count, lr, momentum, nesterov, first);
  }
  void adamw_update_multi(const UpdateSpan* ts, int64_t count, float lr, float b1, float b2, float eps,
                          int64_t step) override {
    launched(chunks(count));
    const std::vector<UpdateSpan> host = on_host(ts, count);
    cpu_.adamw_update_multi(host.data(), count, lr, b1, b2, eps, step);
  }
  void f32_to_f16(uint16_t* d, const float* s, int64_t n) override {
    launched();
    cpu_.f32_to_f16(host_ptr(d), host_ptr(s), n);
  }
  void f16_to_f32(float* d, const uint16_t* s, int64_t n) override {
    launched();
    cpu_.f16_to_f32(host_ptr(d), host_ptr(s), n);
  }
  void f32_to_bf16(uint16_t* d, const float* s, int64_t n) override {
    launched();
    cpu_.f32_to_bf16(host_ptr(d), host_ptr(s), n);
  }
  void bf16_to_f32(float* d, const uint16_t* s, int64_t n) override {
    launched();
    cpu_.bf16_to_f32(host_ptr(d), host_ptr(s), n);
  }
  void synchronize() override {}
  std::shared_ptr<TimeMark> mark() override { return cpu_.mark(); }
  double elapsed_ms(const TimeMark& from, const TimeMark& to) override { return cpu_.elapsed_ms(from, to); }
  std::shared_ptr<PendingValue> sum_later(const float* x, int64_t n) override {
    launched(2);
    return cpu_.sum_later(host_ptr(x), n);
  }

 private:
  void launched(int64_t n = 1) { launches_.fetch_add(n, std::memory_order_relaxed); }
  static int64_t chunks(int64_t count) { return (count + kMultiTensorChunk - 1) / kMultiTensorChunk; }
  static std::vector<Span> on_host(const Span* xs, int64_t count) {
    std::vector<Span> out(xs, xs + count);
    for (Span& x : out) x.data = host_ptr(x.data);
    return out;
  }
  static std::vector<UpdateSpan> on_host(const UpdateSpan* ts, int64_t count) {
    std::vector<UpdateSpan> out(ts, ts + count);
    for (UpdateSpan& t : out) t.param = host_ptr(t.param), t.slot0 = host_ptr(t.slot0), t.slot1 = host_ptr(t.slot1),
                              t.grad = host_ptr(t.grad);
    return out;
  }

  int device_;
  std::atomic<int64_t> launches_{0};
  Kernels& cpu_ = cpu::kernels();  // the CPU kernels of the level this CPU runs
};

struct EmulatedDevices {
  std::mutex mutex;
  std::deque<EmulatedKernels> kernels;  // deque: stable addresses
  std::vector<MemoryStats> stats;
  std::unordered_map<void*, std::pair<int, size_t>> blocks;  // live: ptr -> (device, bytes)
  // Released blocks by (device, exact size), handed out again as the real caching
  // allocator would: device_mallocs stays flat once a loop asks for the same sizes.
  std::multimap<std::pair<int, size_t>, void*> cached;

  EmulatedDevices() {
    const char* env = std::getenv("TANDEM_EMULATED_GPUS");
    const int n = env && *env ? std::atoi(env) : 2;
    for (int d = 0; d < n; ++d) kernels.emplace_back(d);
    stats.resize(static_cast<size_t>(n));
  }
  ~EmulatedDevices() {
    const char* env = std::getenv("TANDEM_EMULATED_LAUNCHES");
    if (!env || !*env || std::string(env) == "0") return;
    for (const EmulatedKernels& k : kernels)
      if (k.launches() > 0)
        std::fprintf(stderr, "emulated cuda:%d: %lld kernel launches\n", k.device().index,
                     static_cast<long long>(k.launches()));
  }
};

EmulatedDevices& devices() {
  static EmulatedDevices instance;
  return instance;
}

void check_index(int device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::invalid_argument("cuda:" + std::to_string(device) + " requested, but " + std::to_string(n) +
                                " emulated CUDA device(s) exist (TANDEM_EMULATED_GPUS)");
}

}  // namespace

int device_count() { return static_cast<int>(devices().kernels.size()); }
std::string unavailable_reason() { return ""; }

void* alloc(size_t bytes, int device) {
  check_index(device);
  if (bytes == 0) return nullptr;
  EmulatedDevices& e = devices();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    MemoryStats& s = e.stats[static_cast<size_t>(device)];
    auto hit = e.cached.find({device, bytes});
    if (hit != e.cached.end()) {
      p = hit->second;
      e.cached.erase(hit);
      ++s.cache_hits;
    } else {
      p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
      if (!p) throw std::bad_alloc();
      s.reserved_bytes += bytes;
      ++s.device_mallocs;
    }
    e.blocks[p] = {device, bytes};
    s.allocated_bytes += bytes;
    s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  }
  std::memset(p, 0xff, bytes);  // NaN in every float, new or reused: reads of unwritten memory show
  return device_ptr(p);
}

void free(void* device_block, size_t, int device) {
  if (!device_block) return;
  void* ptr = host_ptr(device_block);
  EmulatedDevices& e = devices();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.blocks.find(ptr);
    if (it == e.blocks.end() || it->second.first != device) {
      std::fprintf(stderr, "emulated cuda: free of %p on cuda:%d, which it does not hold\n", device_block, device);
      std::abort();  // a double free or a free on the wrong device: a bug worth a core
    }
    e.stats[static_cast<size_t>(device)].allocated_bytes -= it->second.second;
    e.cached.emplace(it->second, ptr);
    e.blocks.erase(it);
  }
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (dst_device.is_cuda()) check_index(dst_device.index);
  if (src_device.is_cuda()) check_index(src_device.index);
  if (bytes == 0) return;
  std::memcpy(dst_device.is_cuda() ? host_ptr(dst) : dst, src_device.is_cuda() ? host_ptr(src) : src, bytes);
}

Kernels& kernels(int device) {
  check_index(device);
  return devices().kernels[static_cast<size_t>(device)];
}

void* compute_stream(int device) {
  check_index(device);
  return nullptr;
}

void synchronize(int device) { check_index(device); }

void set_device(int device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw std::invalid_argument("cannot use cuda:" + std::to_string(device) + ": " + std::to_string(n) +
                                " emulated CUDA device(s) exist (TANDEM_EMULATED_GPUS)");
}

std::string device_name(int device) {
  check_index(device);
  return "emulated GPU " + std::to_string(device) + " (host memory, CPU kernels)";
}

MemoryStats memory_stats(int device) {
  check_index(device);
  std::lock_guard<std::mutex> lock(devices().mutex);
  return devices().stats[static_cast<size_t>(device)];
}

size_t peak_allocated_bytes(int device) { return memory_stats(device).peak_allocated_bytes; }

void reset_peak_memory(int device) {
  check_index(device);
  std::lock_guard<std::mutex> lock(devices().mutex);
  MemoryStats& s = devices().stats[static_cast<size_t>(device)];
  s.peak_allocated_bytes = s.allocated_bytes;
}

void empty_cache(int device) {
  check_index(device);
  EmulatedDevices& e = devices();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (auto it = e.cached.begin(); it != e.cached.end();) {
    if (it->first.first != device) {
      ++it;
      continue;
    }
    e.stats[static_cast<size_t>(device)].reserved_bytes -= it->first.second;
    std::free(it->second);
    it = e.cached.erase(it);
  }
}

void* alloc_pinned_host(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void free_pinned_host(void* ptr) { std::free(ptr); }

}  // namespace tandem::cuda
