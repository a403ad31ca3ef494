// PrefetchingSource: a BatchSource that assembles the next batches on its own thread while
// the caller trains on the current one (tandem-train's --prefetch). For a CUDA device it
// also uploads them there (through the pinned ring, cuda/pinned_staging.h), so the
// GPU does not idle while the host gathers, normalises and copies a batch.
//
// Invariant: it returns exactly the batches the wrapped source would, in the same order,
// and position() is the consumer's (the batch next() returns next), never the thread's, so
// checkpoints save the same loader position with and without it. An exception thrown
// while assembling a batch is kept and rethrown by the next() that would have returned
// that batch, so a bad batch fails the run at the same step as without prefetch, and one
// that is never asked for fails nothing. The thread is joined on every path (destructor).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/data/loader.h"

namespace tandem {

struct PrefetchOptions {
  int64_t depth = 1;             // batches kept ready ahead of the consumer (>= 1)
  std::optional<Device> upload = std::nullopt;  // a CUDA device: inputs and targets are uploaded there too
};

class PrefetchingSource final : public BatchSource {
 public:
  // Starts the thread, which begins with `inner`'s current position.
  PrefetchingSource(std::unique_ptr<BatchSource> inner, PrefetchOptions options);
  ~PrefetchingSource() override;
  PrefetchingSource(const PrefetchingSource&) = delete;
  PrefetchingSource& operator=(const PrefetchingSource&) = delete;

  // Constant for a source's lifetime: read without waiting for the thread.
  int64_t batch_size() const override { return batch_size_; }
  int64_t replicas() const override { return replicas_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  // Drops what was assembled ahead, waits for the batch in progress (if any) and seeks.
  void seek(LoaderPosition position) override;
  LoaderPosition position() const override;
  std::optional<Batch> next() override;

 private:
  struct Ready {
    Batch batch;
    LoaderPosition after;  // the inner source's position once it returned this batch
  };
  void run();
  void upload(Batch& batch) const;

  std::unique_ptr<BatchSource> inner_;  // touched by the thread only while busy_, else under mutex_
  const PrefetchOptions options_;
  const int64_t batch_size_, replicas_, steps_per_epoch_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // any of the fields below changed
  std::deque<Ready> ready_;
  std::exception_ptr error_;   // the failure of the batch after ready_'s last
  bool epoch_done_ = false;    // the inner source returned nullopt after ready_'s last
  bool busy_ = false;          // the thread is inside inner_->next() (or uploading)
  bool stop_ = false;
  uint64_t generation_ = 0;    // bumped by seek(): a batch begun before it is dropped
  LoaderPosition position_;    // the consumer's
  std::thread thread_;         // last: started once every field above is initialised
};

}  // namespace tandem
