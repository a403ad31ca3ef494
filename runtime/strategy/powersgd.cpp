// PowerSGD's state, its bucket hook, and its checkpoint part (powersgd.h).
#include "runtime/strategy/powersgd.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>

#include "runtime/allocator.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/kernels.h"
#include "runtime/host_collectives.h"

namespace tandem {

void orthonormalize_columns(float* p, int64_t n, int64_t r, float epsilon) {
  for (int64_t i = 0; i < r; ++i) {
    double norm = 0;
    for (int64_t row = 0; row < n; ++row) norm += static_cast<double>(p[row * r + i]) * p[row * r + i];
    const double inv = 1.0 / (std::sqrt(norm) + static_cast<double>(epsilon));
    for (int64_t row = 0; row < n; ++row) p[row * r + i] = static_cast<float>(p[row * r + i] * inv);
    for (int64_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (int64_t row = 0; row < n; ++row) dot += static_cast<double>(p[row * r + i]) * p[row * r + j];
      for (int64_t row = 0; row < n; ++row) p[row * r + j] = static_cast<float>(p[row * r + j] - dot * p[row * r + i]);
    }
  }
}

// One bucket's reduction. Its layout (where each parameter goes in the two all-reduced
// buffers) is worked out at each compressed launch from the state's decision.
class PowerSgdHook final : public CommHook {
 public:
  // dry: the gate's timing run (no error feedback read or written, no Q kept, every
  // eligible matrix compressed whatever the decision).
  // direct: the group takes the bucket's device. Otherwise (a GPU bucket over mpi, gloo or
  // shm) each all-reduced buffer is staged through host memory: down before the
  // collective, up after it (the factors are small; an uncompressed step stages the bucket).
  PowerSgdHook(PowerSgd& state, PowerSgdBucket bucket, bool direct = true, bool dry = false)
      : state_(state), bucket_(std::move(bucket)), direct_(direct), dry_(dry) {}
  ~PowerSgdHook() override {
    // An op that never completed (a timeout) may still write into a host buffer from the
    // engine's abandoned thread: the buffers are then left to the process's exit.
    if (last_ && !last_->is_completed()) {
      static std::mutex mutex;
      static std::vector<Tensor> abandoned;  // reachable until exit
      std::lock_guard<std::mutex> lock(mutex);
      for (Tensor* t : {&h0_, &h1_, &h2_}) abandoned.push_back(std::move(*t));
    }
  }

  std::shared_ptr<Work> launch(ProcessGroup& group, Tensor& flat) override {
    world_ = group.size();
    stage_ = 0;
    compressing_ = state_.compressing() && plan(flat.device());
    if (!compressing_) return reduce(group, flat, h0_, ReduceOp::avg);
    compute_p(flat);
    stage_ = 1;
    return reduce(group, s1_, h1_, ReduceOp::sum);
  }

  std::shared_ptr<Work> next(ProcessGroup& group, Tensor& flat) override {
    if (!compressing_ || stage_ != 1) return nullptr;
    unstage(s1_, h1_);
    unpack_uncompressed(flat);
    orthonormalize_p(flat.device());
    compute_q(flat);
    stage_ = 2;
    return reduce(group, s2_, h2_, ReduceOp::sum);
  }

  void finish(Tensor& flat) override {
    if (!compressing_) {
      unstage(flat, h0_);
      return;
    }
    unstage(s2_, h2_);
    decompress(flat);
  }

  // The gate's measurement: the whole arithmetic on `copy`, no communication.
  void dry_run(Tensor& copy, int world) {
    world_ = world;
    if (!plan(copy.device())) return;
    compute_p(copy);
    unpack_uncompressed(copy);
    orthonormalize_p(copy.device());
    compute_q(copy);
    decompress(copy);
  }

 private:
  // All-reduces `t`, through `host` when the group does not take t's device.
  std::shared_ptr<Work> reduce(ProcessGroup& group, Tensor& t, Tensor& host, ReduceOp op) {
    if (direct_) return last_ = group.allreduce(buffer_of(t), op);
    if (!host.defined() || host.numel() != t.numel()) host = Tensor::empty({t.numel()}, DType::f32, Device::cpu());
    device_copy(host.raw(), Device::cpu(), t.raw(), t.device(), t.nbytes());
    return last_ = group.allreduce(buffer_of(host), op);
  }
  // After a staged all-reduce completed: its result back into `t`.
  void unstage(Tensor& t, const Tensor& host) {
    if (!direct_) device_copy(t.raw(), t.device(), host.raw(), Device::cpu(), t.nbytes());
  }

  bool compressed(size_t param) const {
    const PowerSgd::Slot& s = state_.slots_[param];
    return s.eligible && (dry_ || s.compress);
  }

  // Offsets of the uncompressed gradients and the Ps in s1, of the Qs in s2; false when
  // nothing in the bucket is compressed.
  bool plan(Device device) {
    const int64_t r = state_.options_.rank;
    place_.assign(bucket_.params.size(), 0);
    int64_t uncompressed = 0, q_total = 0;
    bool any = false;
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      const PowerSgd::Slot& s = state_.slots_[bucket_.params[j]];
      if (compressed(bucket_.params[j])) {
        any = true;
      } else {
        place_[j] = uncompressed;
        uncompressed += s.n * s.m;
      }
    }
    if (!any) return false;
    int64_t p_at = uncompressed;
    q_place_.assign(bucket_.params.size(), 0);
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      if (!compressed(bucket_.params[j])) continue;
      const PowerSgd::Slot& s = state_.slots_[bucket_.params[j]];
      place_[j] = p_at;
      p_at += s.n * r;
      q_place_[j] = q_total;
      q_total += s.m * r;
    }
    uncompressed_ = uncompressed;
    if (!s1_.defined() || s1_.numel() != p_at || s1_.device() != device)
      s1_ = Tensor::zeros({p_at}, DType::f32, device);
    if (!s2_.defined() || s2_.numel() != q_total || s2_.device() != device)
      s2_ = Tensor::zeros({q_total}, DType::f32, device);
    return true;
  }

  // M += error; P = M Q (compressed) or a copy into s1 (the rest).
  void compute_p(Tensor& flat) {
    Kernels& k = kernels_for(flat.device());
    const int64_t r = state_.options_.rank;
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      const size_t idx = bucket_.params[j];
      PowerSgd::Slot& s = state_.slots_[idx];
      float* m = flat.f32() + bucket_.offsets[j];
      if (!compressed(idx)) {
        k.copy(s1_.f32() + place_[j], m, s.n * s.m);
        continue;
      }
      if (!dry_ && s.error.defined()) k.axpy(m, s.error.f32(), s.n * s.m, 1.0f);
      const Tensor q = dry_ ? draw(idx) : state_.q_of(idx);
      k.gemm(s1_.f32() + place_[j], m, q.f32(), s.n, r, s.m, false, false, 1.0f, 0.0f);
    }
  }

  // The uncompressed gradients' sum back into the bucket, averaged.
  void unpack_uncompressed(Tensor& flat) {
    Kernels& k = kernels_for(flat.device());
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      const size_t idx = bucket_.params[j];
      if (compressed(idx)) continue;
      const PowerSgd::Slot& s = state_.slots_[idx];
      float* m = flat.f32() + bucket_.offsets[j];
      k.copy(m, s1_.f32() + place_[j], s.n * s.m);
      k.scale(m, s.n * s.m, 1.0f / static_cast<float>(world_));
    }
  }

  // Every P of the bucket orthonormalised, on the host (the Ps are small: n x r each).
  void orthonormalize_p(Device device) {
    const int64_t r = state_.options_.rank;
    const int64_t count = s1_.numel() - uncompressed_;
    float* ps = s1_.f32() + uncompressed_;
    std::vector<float> staged;
    float* host = ps;
    if (!device.is_cpu()) {
      staged.resize(static_cast<size_t>(count));
      device_copy(staged.data(), Device::cpu(), ps, device, static_cast<size_t>(count) * sizeof(float));
      host = staged.data();
    }
    for (size_t j = 0; j < bucket_.params.size(); ++j)
      if (compressed(bucket_.params[j]))
        orthonormalize_columns(host + (place_[j] - uncompressed_), state_.slots_[bucket_.params[j]].n, r,
                               state_.options_.epsilon);
    if (!device.is_cpu()) device_copy(ps, device, staged.data(), Device::cpu(), static_cast<size_t>(count) * sizeof(float));
  }

  // Q = M^T P.
  void compute_q(Tensor& flat) {
    Kernels& k = kernels_for(flat.device());
    const int64_t r = state_.options_.rank;
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      const size_t idx = bucket_.params[j];
      if (!compressed(idx)) continue;
      const PowerSgd::Slot& s = state_.slots_[idx];
      k.gemm(s2_.f32() + q_place_[j], flat.f32() + bucket_.offsets[j], s1_.f32() + place_[j], s.m, r, s.n, true,
             false, 1.0f, 0.0f);
    }
  }

  // Q /= W; error = M - P Q^T; M = P Q^T; Q kept (warm start).
  void decompress(Tensor& flat) {
    Kernels& k = kernels_for(flat.device());
    const int64_t r = state_.options_.rank;
    k.scale(s2_.f32(), s2_.numel(), 1.0f / static_cast<float>(world_));
    for (size_t j = 0; j < bucket_.params.size(); ++j) {
      const size_t idx = bucket_.params[j];
      if (!compressed(idx)) continue;
      PowerSgd::Slot& s = state_.slots_[idx];
      float* m = flat.f32() + bucket_.offsets[j];
      const float* q = s2_.f32() + q_place_[j];
      if (!dry_) {
        if (!s.error.defined()) s.error = Tensor::empty({s.n * s.m}, DType::f32, flat.device());
        k.copy(s.error.f32(), m, s.n * s.m);
      }
      k.gemm(m, s1_.f32() + place_[j], q, s.n, s.m, r, false, true, 1.0f, 0.0f);
      if (!dry_) {
        k.axpy(s.error.f32(), m, s.n * s.m, -1.0f);
        k.copy(state_.q_of(idx).f32(), q, s.m * r);
      }
    }
  }

  Tensor draw(size_t idx) {
    // The dry run must not draw the state's Q (that would consume nothing, but keep the
    // state untouched all the same): a Q of the right shape, filled alike.
    auto it = dry_q_.find(idx);
    if (it != dry_q_.end()) return it->second;
    const PowerSgd::Slot& s = state_.slots_[idx];
    Tensor q = Tensor::zeros({s.m, state_.options_.rank}, DType::f32, state_.params_[idx]->value.device());
    kernels_for(q.device()).fill(q.f32(), q.numel(), 1.0f / std::sqrt(static_cast<float>(s.m)));
    return dry_q_[idx] = q;
  }

  PowerSgd& state_;
  PowerSgdBucket bucket_;
  bool direct_;
  bool dry_;
  int world_ = 1;
  int stage_ = 0;
  bool compressing_ = false;
  std::vector<int64_t> place_, q_place_;
  int64_t uncompressed_ = 0;
  Tensor s1_, s2_;  // [uncompressed | Ps], [Qs]
  Tensor h0_, h1_, h2_;  // host staging of the bucket, s1_ and s2_ (not direct)
  std::shared_ptr<Work> last_;  // the op reading and writing them
  std::map<size_t, Tensor> dry_q_;
};

PowerSgd::PowerSgd(PowerSgdOptions options, std::vector<Parameter*> params)
    : options_(options), params_(std::move(params)) {
  if (options_.rank < 1) throw std::invalid_argument("PowerSGD: the rank must be at least 1");
  if (options_.start_step < 0) throw std::invalid_argument("PowerSGD: the start step must be >= 0");
  if (!(options_.epsilon > 0)) throw std::invalid_argument("PowerSGD: epsilon must be positive");
  if (!(options_.min_compression_rate >= 1)) throw std::invalid_argument("PowerSGD: the minimum compression rate must be >= 1");
  const int64_t r = options_.rank;
  for (const Parameter* p : params_) {
    Slot s;
    const Shape& shape = p->value.shape();
    const int64_t numel = p->value.numel();
    s.n = shape.size() >= 2 ? shape[0] : numel;
    s.m = s.n > 0 ? numel / s.n : 0;
    // A frozen parameter is in no bucket: never compressed, no state.
    s.eligible = p->requires_grad && shape.size() >= 2 && p->value.dtype() == DType::f32 &&
                 static_cast<double>(s.n) * static_cast<double>(s.m) >
                     options_.min_compression_rate * static_cast<double>((s.n + s.m) * r);
    if (!s.eligible) s.n = numel, s.m = 1;  // uncompressed: only its element count matters
    slots_.push_back(std::move(s));
  }
  if (options_.gate == PowerSgdGate::always) {
    for (Slot& s : slots_) s.compress = s.eligible;
    decided_ = true;
  }
}

std::unique_ptr<CommHook> PowerSgd::make_hook(const Tensor& flat, PowerSgdBucket bucket, bool direct) {
  if (flat.dtype() != DType::f32) throw std::invalid_argument("PowerSGD reduces f32 gradients only");
  return std::make_unique<PowerSgdHook>(*this, std::move(bucket), direct);
}

Tensor& PowerSgd::q_of(size_t param) {
  Slot& s = slots_[param];
  if (!s.q.defined()) {
    // Seeded by the parameter's place, the same on every rank; normal entries, as in the paper.
    std::mt19937_64 gen(options_.seed * 0x9E3779B97F4A7C15ull + param + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(s.m * options_.rank));
    for (float& v : values) v = normal(gen);
    s.q = Tensor::from_vector(values, {s.m, options_.rank}).on(params_[param]->value.device());
  }
  return s.q;
}

int64_t PowerSgd::eligible_bytes(const PowerSgdBucket& bucket) const {
  int64_t bytes = 0;
  for (size_t idx : bucket.params)
    if (slots_[idx].eligible) bytes += slots_[idx].n * slots_[idx].m * 4;
  return bytes;
}

std::pair<int64_t, int64_t> PowerSgd::message_bytes(const PowerSgdBucket& bucket) const {
  int64_t first = 0, second = 0;
  for (size_t idx : bucket.params) {
    const Slot& s = slots_[idx];
    first += s.eligible ? s.n * options_.rank : s.n * s.m;
    if (s.eligible) second += s.m * options_.rank;
  }
  return {first * 4, second * 4};
}

int64_t PowerSgd::sent_bytes(const PowerSgdBucket& bucket) const {
  const auto [first, second] = message_bytes(bucket);
  return first + second;
}

double PowerSgd::time_compression(const Tensor& flat, const PowerSgdBucket& bucket, int world) {
  if (eligible_bytes(bucket) == 0) return 0;
  PowerSgdHook hook(*this, bucket, /*direct=*/true, /*dry=*/true);
  Tensor copy = flat.clone();
  Kernels& k = kernels_for(flat.device());
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 3; ++rep) {
    k.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    hook.dry_run(copy, world);
    k.synchronize();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void PowerSgd::decide(const std::vector<PowerSgdBucket>& buckets, const std::vector<PowerSgdBucketGate>& gates,
                      double predicted_step_ms, double uncompressed_step_ms) {
  if (buckets.size() != gates.size()) throw std::logic_error("PowerSGD: one gate per bucket");
  for (Slot& s : slots_) s.compress = false;
  for (size_t b = 0; b < buckets.size(); ++b)
    if (gates[b].compress)
      for (size_t idx : buckets[b].params) slots_[idx].compress = slots_[idx].eligible;
  gates_ = gates;
  predicted_step_ms_ = predicted_step_ms;
  uncompressed_step_ms_ = uncompressed_step_ms;
  decided_ = true;
}

PowerSgdSummary PowerSgd::summary() const {
  PowerSgdSummary s;
  s.rank = options_.rank;
  s.start_step = options_.start_step;
  s.gate = options_.gate == PowerSgdGate::model ? "model" : "always";
  s.decided = decided_;
  s.steps = steps_;
  for (const Slot& slot : slots_) {
    if (slot.compress) ++s.compressed_params;
  }
  s.buckets = gates_;
  for (const PowerSgdBucketGate& g : gates_) {
    s.bytes += g.bytes;
    s.sent_bytes += g.compress ? g.sent_bytes : g.bytes;
  }
  s.predicted_step_ms = predicted_step_ms_;
  s.uncompressed_step_ms = uncompressed_step_ms_;
  return s;
}

TensorFile PowerSgd::checkpoint_state(ProcessGroup& group, std::chrono::milliseconds timeout) const {
  TensorFile st;
  std::string names;
  for (size_t idx = 0; idx < slots_.size(); ++idx)
    if (slots_[idx].compress) names += (names.empty() ? "" : ",") + params_[idx]->name;
  st.metadata = {{"tandem.content", "comm_hook"},
                 {"hook", "powersgd"},
                 {"powersgd.rank", std::to_string(options_.rank)},
                 {"powersgd.steps", std::to_string(steps_)},
                 {"powersgd.decided", decided_ ? "1" : "0"},
                 {"powersgd.world", std::to_string(group.size())},
                 {"powersgd.compressed", names}};
  const int world = group.size();
  for (size_t idx = 0; idx < slots_.size(); ++idx) {
    const Slot& s = slots_[idx];
    if (!s.compress) continue;
    const std::string& name = params_[idx]->name;
    if (s.q.defined()) st.tensors.emplace_back("powersgd.q." + name, s.q.to(Device::cpu()));
    // Every rank's error feedback: gathered, rank r's at row r.
    const int64_t numel = s.n * s.m;
    Tensor all = Tensor::zeros({world, numel}, DType::f32, Device::cpu());
    if (s.error.defined()) all.view(group.rank() * numel, {numel}).copy_from(s.error);
    if (world > 1) host_allgather(group, buffer_of(all), params_[idx]->value.device(), timeout);
    if (group.rank() != 0) continue;
    for (int r = 0; r < world; ++r)
      st.tensors.emplace_back("powersgd.error.rank" + std::to_string(r) + "." + name, all.view(r * numel, {numel}));
  }
  return st;
}

namespace {

std::string meta_of(const SafetensorsHeader& h, const std::string& path, const std::string& key) {
  auto it = h.metadata.find(key);
  if (it == h.metadata.end()) throw CheckpointError(path + ": __metadata__ has no '" + key + "'");
  return it->second;
}

int64_t int_meta(const SafetensorsHeader& h, const std::string& path, const std::string& key) {
  const std::string text = meta_of(h, path, key);
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 0)
    throw CheckpointError(path + ": __metadata__ '" + key + "' is '" + text + "', not a count");
  return v;
}

}  // namespace

void PowerSgd::restore(const std::string& path, uint32_t crc32, int world, int my_rank) {
  const SafetensorsHeader h = read_safetensors_header(path);
  if (meta_of(h, path, "hook") != "powersgd")
    throw CheckpointError(path + ": holds the state of comm hook '" + meta_of(h, path, "hook") + "', not powersgd");
  const int64_t saved_rank = int_meta(h, path, "powersgd.rank");
  if (saved_rank != options_.rank)
    throw CheckpointError(path + ": written with --powersgd-rank " + std::to_string(saved_rank) + ", this run uses " +
                          std::to_string(options_.rank) + ": its matrices do not fit (resume with --powersgd-rank " +
                          std::to_string(saved_rank) + ")");
  const int64_t steps = int_meta(h, path, "powersgd.steps");
  const bool decided = int_meta(h, path, "powersgd.decided") != 0;
  const int64_t saved_world = int_meta(h, path, "powersgd.world");
  std::set<std::string> compressed;
  const std::string list = meta_of(h, path, "powersgd.compressed");
  for (size_t at = 0; at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    compressed.insert(list.substr(at, comma - at));
    at = comma + 1;
  }
  // Everything checked before anything changes.
  std::map<std::string, Tensor> into;
  std::vector<std::pair<size_t, std::string>> qs, errors;
  std::set<std::string> known;
  for (size_t idx = 0; idx < slots_.size(); ++idx) {
    const std::string& name = params_[idx]->name;
    known.insert(name);
    if (!compressed.contains(name)) continue;
    const Slot& s = slots_[idx];
    if (!s.eligible)
      throw CheckpointError(path + ": compresses '" + name + "', which this run does not (another shape or "
                            "--powersgd-min-compression?)");
    auto want = [&](const std::string& key, const Shape& shape, bool required) {
      const SafetensorsEntry* e = h.find(key);
      if (!e) {
        if (required) throw CheckpointError(path + ": tensor '" + key + "' is missing");
        return false;
      }
      if (e->dtype != DType::f32 || e->shape != shape)
        throw CheckpointError(path + ": tensor '" + key + "' has shape " + shape_str(e->shape) + ", expected " +
                              shape_str(shape));
      into[key] = Tensor::zeros(shape, DType::f32, Device::cpu());
      return true;
    };
    if (want("powersgd.q." + name, {s.m, options_.rank}, false)) qs.emplace_back(idx, "powersgd.q." + name);
    const std::string err = "powersgd.error.rank" + std::to_string(my_rank) + "." + name;
    if (saved_world == world && want(err, {s.n * s.m}, true)) errors.emplace_back(idx, err);
  }
  for (const std::string& name : compressed)
    if (!name.empty() && !known.contains(name))
      throw CheckpointError(path + ": compresses '" + name + "', a parameter this model does not have");
  const SafetensorsChecksums sums = read_safetensors_data(path, h, &into);
  if (sums.file_crc32 != crc32)
    throw CheckpointError(path + ": changed while loading (crc32 " + crc32_hex(sums.file_crc32) + ", verified as " +
                          crc32_hex(crc32) + ")");
  for (Slot& s : slots_) s.compress = false, s.q = Tensor(), s.error = Tensor();
  for (size_t idx = 0; idx < slots_.size(); ++idx) slots_[idx].compress = compressed.contains(params_[idx]->name);
  for (const auto& [idx, key] : qs) slots_[idx].q = into.at(key).on(params_[idx]->value.device());
  for (const auto& [idx, key] : errors) slots_[idx].error = into.at(key).on(params_[idx]->value.device());
  steps_ = steps;
  decided_ = decided || options_.gate == PowerSgdGate::always;
  if (options_.gate == PowerSgdGate::always && !decided)
    for (Slot& s : slots_) s.compress = s.eligible;
  if (saved_world != world)
    spdlog::warn("PowerSGD: {} was written by {} ranks, this run has {}: the warm-start matrices and the decision are "
                 "kept, the error feedback starts again at zero",
                 path, saved_world, world);
}

}  // namespace tandem
