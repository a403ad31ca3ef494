// DataLoader and batch assembly.
// Invariant: a batch depends only on (sampler options, epoch, step), never on loader history.
#include "runtime/data/loader.h"

#if defined(TANDEM_CPU_DISPATCH)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cpu/cpu_isa.h"

namespace tandem {

namespace {

// dst[k] = (src[k] / 255 - mean) / std, each operation rounded as written: the same bits as
// a 256-entry table of that formula, but two vector divisions per 8 pixels instead of a
// load per pixel, which matters where a GPU waits for the host to assemble large batches
// (loader.h gives the measured time). The AVX2 loop runs where the CPU kernels run at
// avx2 or above (runtime/cpu/cpu_isa.h); it computes the same bits as the scalar loop.
void normalise_pixels_scalar(float* dst, const uint8_t* src, int64_t k, int64_t n, float mean, float std_dev) {
  for (; k < n; ++k) dst[k] = (static_cast<float>(src[k]) / 255.0f - mean) / std_dev;
}

#if defined(TANDEM_CPU_DISPATCH)
__attribute__((target("avx2"))) void normalise_pixels_avx2(float* dst, const uint8_t* src, int64_t n, float mean,
                                                           float std_dev) {
  int64_t k = 0;
  const __m256 v255 = _mm256_set1_ps(255.0f), vmean = _mm256_set1_ps(mean), vstd = _mm256_set1_ps(std_dev);
  for (; k + 8 <= n; k += 8) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + k)));
    const __m256 x = _mm256_cvtepi32_ps(bytes);
    _mm256_storeu_ps(dst + k, _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(x, v255), vmean), vstd));
  }
  normalise_pixels_scalar(dst, src, k, n, mean, std_dev);
}
#endif

void normalise_pixels(float* dst, const uint8_t* src, int64_t n, float mean, float std_dev) {
#if defined(TANDEM_CPU_DISPATCH)
  if (cpu::cpu_isa() >= cpu::CpuIsa::avx2) return normalise_pixels_avx2(dst, src, n, mean, std_dev);
#endif
  normalise_pixels_scalar(dst, src, 0, n, mean, std_dev);
}

}  // namespace

Batch make_batch(const Dataset& dataset, std::span<const int64_t> indices) {
  const int64_t B = static_cast<int64_t>(indices.size());
  const int64_t numel = dataset.sample_numel();

  Batch batch;
  batch.inputs = Tensor::empty({B, dataset.channels, dataset.height, dataset.width}, DType::f32);
  batch.labels = Tensor::empty({B}, DType::i32);
  batch.indices.assign(indices.begin(), indices.end());
  float* images = batch.inputs.f32();
  int32_t* labels = batch.labels.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)];
    if (i < 0 || i >= dataset.size)
      throw std::out_of_range("make_batch: index " + std::to_string(i) + " is outside dataset '" +
                              dataset.name + "' of " + std::to_string(dataset.size) + " samples");
    const uint8_t* src = dataset.sample(i);
    float* dst = images + b * numel;
    normalise_pixels(dst, src, numel, dataset.mean, dataset.std);
    labels[b] = dataset.labels[static_cast<size_t>(i)];
  }
  return batch;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler,
                       int64_t batch_size, bool drop_last)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), batch_size_(batch_size),
      drop_last_(drop_last) {
  if (!dataset_) throw std::invalid_argument("DataLoader: no dataset");
  if (batch_size_ < 1)
    throw std::invalid_argument("DataLoader: batch size must be >= 1, got " +
                                std::to_string(batch_size_));
  if (sampler_.dataset_size() != dataset_->size)
    throw std::invalid_argument("DataLoader: sampler covers " +
                                std::to_string(sampler_.dataset_size()) + " samples, dataset '" +
                                dataset_->name + "' has " + std::to_string(dataset_->size));
}

int64_t DataLoader::steps_per_epoch() const {
  const int64_t n = sampler_.num_samples();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void DataLoader::seek(LoaderPosition position) {
  if (position.epoch != sampler_.epoch()) sampler_.set_epoch(position.epoch);
  const int64_t steps = steps_per_epoch();
  if (position.step_in_epoch < 0 || position.step_in_epoch > steps)
    throw std::out_of_range("DataLoader: step " + std::to_string(position.step_in_epoch) +
                            " is outside an epoch of " + std::to_string(steps) + " steps");
  step_ = position.step_in_epoch;
}

LoaderPosition BatchSource::position_of(int64_t global_step) const {
  const int64_t steps = steps_per_epoch();
  if (steps == 0) throw std::logic_error("an epoch has no full batch");
  if (global_step < 0)
    throw std::out_of_range("negative global step " + std::to_string(global_step));
  return {global_step / steps, global_step % steps};
}

std::optional<Batch> DataLoader::next() {
  if (step_ >= steps_per_epoch()) return std::nullopt;
  Batch batch = batch_at(step_);
  ++step_;
  return batch;
}

Batch DataLoader::batch_at(int64_t step) const {
  const int64_t steps = steps_per_epoch();
  if (step < 0 || step >= steps)
    throw std::out_of_range("DataLoader: batch " + std::to_string(step) +
                            " is outside an epoch of " + std::to_string(steps) + " steps");
  const std::vector<int64_t>& order = sampler_.indices();
  const int64_t begin = step * batch_size_;
  const int64_t end = std::min(begin + batch_size_, static_cast<int64_t>(order.size()));
  Batch batch = make_batch(*dataset_, std::span<const int64_t>(order.data() + begin,
                                                               static_cast<size_t>(end - begin)));
  batch.epoch = sampler_.epoch();
  batch.step_in_epoch = step;
  return batch;
}

}  // namespace tandem
