// A fixed set of worker threads that run one function per index in parallel and
// wait for all: DataParallel's "run forward on every replica at once". Exceptions
// thrown by any index are rethrown (the first one) on the calling thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  // Runs fn(0) .. fn(size()-1), each on its own worker, and returns when all are done.
  void run_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace tandem
