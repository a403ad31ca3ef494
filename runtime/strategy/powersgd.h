// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): DDP's gradients all-reduced as
// low-rank factors (docs/scaling.md, "PowerSGD"). A bucket's matrix M (a parameter's
// gradient viewed as n x m: its first dimension by the rest) is sent as P (n x r) and
// Q (m x r), r = the rank, in two all-reduces instead of n x m values:
//
//   launch   M += error (error feedback); P = M Q; one all-reduce (sum) of
//            [the bucket's uncompressed gradients | every P]
//   next     uncompressed gradients / W; P orthonormalised (Gram-Schmidt, each column
//            divided by its norm + epsilon, so an all-zero column stays zero, never NaN);
//            Q = M^T P; one all-reduce (sum) of [every Q]
//   finish   Q /= W; error = M - P Q^T; M = P Q^T; Q kept for the next step (warm start)
//
// Uncompressed, batched into the first all-reduce: 1-D gradients (biases, norms) and
// matrices whose factors would not be `min_compression_rate` times smaller than they are.
// The first `start_step` steps are all-reduced uncompressed (plain averages).
//
// State lives here, per parameter, not per bucket, so it survives the reducer cutting its
// buckets again. Every rank must agree on what is compressed: the gate's decision is rank
// 0's, broadcast (Reducer), and the first Q of each matrix comes from a seeded generator,
// the same on every rank. The error feedback differs from rank to rank; checkpoints gather
// it (checkpoint_state) so a resume continues bit for bit.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/collectives/process_group.h"
#include "tandem/runtime/checkpoint/safetensors.h"
#include "tandem/runtime/module.h"
#include "tandem/runtime/strategy/comm_hook.h"

namespace tandem {

// Who decides which buckets are compressed: the cost model (each bucket compressed only
// where the predicted saving in exposed communication beats the measured cost of the
// factor GEMMs and the orthonormalisation), or always (every eligible matrix).
enum class PowerSgdGate { model, always };

struct PowerSgdOptions {
  int rank = 1;                     // columns of P and Q
  int64_t start_step = 10;          // synchronised steps all-reduced uncompressed first
  PowerSgdGate gate = PowerSgdGate::model;
  double min_compression_rate = 2;  // compress n x m only when n m > rate (n + m) r
  float epsilon = 1e-8f;            // orthonormalisation: column / (norm + epsilon)
  uint64_t seed = 0;                // the first Q of every matrix (the same on every rank)
};

// The gate's reasoning for one bucket (the log and the summary).
struct PowerSgdBucketGate {
  int64_t bytes = 0;             // the bucket's gradients
  int64_t sent_bytes = 0;        // what compression would send: both all-reduces
  double measured_ms = 0;        // its uncompressed all-reduce, as timed in the steps before
  double predicted_ms = 0;       // the two compressed all-reduces, from the group's probe
  double compute_ms = 0;         // the factor GEMMs, orthonormalisation and error, timed here
  bool compress = false;
};

struct PowerSgdSummary {
  int rank = 0;
  int64_t start_step = 0;
  std::string gate;              // "model" or "always"
  bool decided = false;
  int64_t steps = 0;             // synchronised steps reduced so far (both kinds)
  int64_t compressed_params = 0;
  int64_t bytes = 0, sent_bytes = 0;  // a compressed step's gradients and what it sends
  double predicted_step_ms = 0, uncompressed_step_ms = 0;  // the model's, when it decided
  std::vector<PowerSgdBucketGate> buckets;  // the gate's view, bucket by bucket
};

// A bucket's part in PowerSGD: its parameters (indices into the parameter list the
// PowerSgd was built with) and their element offsets in the bucket's buffer.
struct PowerSgdBucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;
};

class PowerSgd {
 public:
  PowerSgd(PowerSgdOptions options, std::vector<Parameter*> params);

  const PowerSgdOptions& options() const { return options_; }
  // The hook of one bucket (its buffer `flat`; `direct`: the group takes its device).
  std::unique_ptr<CommHook> make_hook(const Tensor& flat, PowerSgdBucket bucket, bool direct);

  // Whether this step's launches compress: decided, and past start_step.
  bool compressing() const { return decided_ && steps_ >= options_.start_step; }
  bool decided() const { return decided_; }
  // Called once per synchronised step after its reduction completed.
  void end_step() { ++steps_; }
  int64_t steps() const { return steps_; }

  // What the bucket's compression would send (both all-reduces, bytes) if its eligible
  // matrices were compressed, and the bytes of its eligible matrices (0: nothing to gain).
  int64_t sent_bytes(const PowerSgdBucket& bucket) const;
  // The same split by all-reduce: [uncompressed | Ps], [Qs].
  std::pair<int64_t, int64_t> message_bytes(const PowerSgdBucket& bucket) const;
  int64_t eligible_bytes(const PowerSgdBucket& bucket) const;
  // Milliseconds the bucket's compression arithmetic takes here (P, orthonormalisation,
  // Q, P Q^T, error), on a copy of `flat`: nothing is changed. The best of three.
  double time_compression(const Tensor& flat, const PowerSgdBucket& bucket, int world);
  // The gate's decision: the eligible matrices of the buckets with compress set are
  // compressed from start_step on; the rest stay uncompressed.
  void decide(const std::vector<PowerSgdBucket>& buckets, const std::vector<PowerSgdBucketGate>& gates,
              double predicted_step_ms, double uncompressed_step_ms);
  PowerSgdSummary summary() const;

  // Checkpoints (kCommHookFile): the warm-start Qs, every rank's error feedback (gathered:
  // a collective, call it on every rank; complete on rank 0), the step count and the
  // decision. Tensors are host copies.
  TensorFile checkpoint_state(ProcessGroup& group, std::chrono::milliseconds timeout) const;
  // Restores this rank's part from a checkpoint's file (`path`, verified by the caller
  // against `crc32`). A checkpoint of another world size keeps Q and the decision and
  // starts the error feedback at zero (logged); another rank is refused (CheckpointError).
  void restore(const std::string& path, uint32_t crc32, int world, int my_rank);

 private:
  friend class PowerSgdHook;
  struct Slot {
    int64_t n = 0, m = 0;     // the gradient as n x m
    bool eligible = false;    // a matrix whose factors would pay
    bool compress = false;    // the gate chose it
    Tensor error;             // n*m, on the parameter's device; undefined: zero
    Tensor q;                 // m x r; undefined: not yet drawn
  };
  Tensor& q_of(size_t param);  // draws the first Q when there is none

  PowerSgdOptions options_;
  std::vector<Parameter*> params_;
  std::vector<Slot> slots_;
  int64_t steps_ = 0;
  bool decided_ = false;
  double predicted_step_ms_ = 0, uncompressed_step_ms_ = 0;
  std::vector<PowerSgdBucketGate> gates_;
};

// Orthonormalises the r columns of the row-major n x r matrix `p` in place (modified
// Gram-Schmidt in double): each column divided by its norm + epsilon after the earlier
// columns' components are removed. An all-zero column stays zero.
void orthonormalize_columns(float* p, int64_t n, int64_t r, float epsilon);

}  // namespace tandem
