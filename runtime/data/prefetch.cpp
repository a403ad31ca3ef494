// The prefetching thread (see prefetch.h).
#include "runtime/data/prefetch.h"

#include <pthread.h>
#include <signal.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem {

namespace {

// Starts `fn` on a thread with every signal blocked, so SIGUSR1 (stop to be resumed) and
// SIGTERM reach the training thread, whose handlers and pause() expect them, not this one.
std::thread start_with_signals_blocked(std::function<void()> fn) {
  sigset_t all, old;
  sigfillset(&all);
  if (pthread_sigmask(SIG_BLOCK, &all, &old) != 0) throw std::runtime_error("prefetch: pthread_sigmask failed");
  std::thread t;
  try {
    t = std::thread(std::move(fn));
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

}  // namespace

PrefetchingSource::PrefetchingSource(std::unique_ptr<BatchSource> inner, PrefetchOptions options)
    : inner_(std::move(inner)),
      options_(options),
      batch_size_(inner_ ? inner_->batch_size() : 0),
      replicas_(inner_ ? inner_->replicas() : 0),
      steps_per_epoch_(inner_ ? inner_->steps_per_epoch() : 0) {
  if (!inner_) throw std::invalid_argument("PrefetchingSource: no batch source");
  if (options_.depth < 1)
    throw std::invalid_argument("PrefetchingSource: depth must be >= 1, got " + std::to_string(options_.depth));
  position_ = inner_->position();
  thread_ = start_with_signals_blocked([this] { run(); });
}

PrefetchingSource::~PrefetchingSource() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();  // at most the batch in progress away: the thread checks stop_ before each
}

void PrefetchingSource::seek(LoaderPosition position) {
  std::unique_lock<std::mutex> lock(mutex_);
  ++generation_;
  changed_.wait(lock, [&] { return !busy_; });  // the inner source is ours until we unlock
  ready_.clear();
  error_ = nullptr;
  epoch_done_ = true;      // until the seek succeeds: a refused one (std::out_of_range) leaves nothing to load
  inner_->seek(position);
  epoch_done_ = false;
  position_ = position;
  lock.unlock();
  changed_.notify_all();
}

LoaderPosition PrefetchingSource::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return position_;
}

std::optional<Batch> PrefetchingSource::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_ || epoch_done_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);  // kept: asking again fails again, as without prefetch
    return std::nullopt;
  }
  Ready r = std::move(ready_.front());
  ready_.pop_front();
  position_ = r.after;
  lock.unlock();
  changed_.notify_all();  // room for the next batch
  return std::move(r.batch);
}

void PrefetchingSource::upload(Batch& batch) const {
  const Device d = *options_.upload;
  if (batch.inputs.defined()) batch.inputs = batch.inputs.on(d);
  if (batch.labels.defined()) batch.labels = batch.labels.on(d);
  for (Tensor& t : batch.extra_targets)
    if (t.defined()) t = t.on(d);
}

void PrefetchingSource::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stop_ || (!error_ && !epoch_done_ && static_cast<int64_t>(ready_.size()) < options_.depth);
    });
    if (stop_) return;
    const uint64_t generation = generation_;
    busy_ = true;
    lock.unlock();
    std::optional<Batch> batch;
    std::exception_ptr error;
    LoaderPosition after;
    try {
      batch = inner_->next();
      if (batch && options_.upload) upload(*batch);
      after = inner_->position();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (generation == generation_) {
      if (error)
        error_ = error;
      else if (!batch)
        epoch_done_ = true;
      else
        ready_.push_back({std::move(*batch), after});
    }
    changed_.notify_all();
  }
}

}  // namespace tandem
