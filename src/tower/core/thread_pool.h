#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace tower {

// A fixed set of worker threads. Exceptions thrown by tasks are captured and rethrown on the
// caller's thread (by the future of submit(), or by parallel_for()).
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }
  std::future<void> submit(std::function<void()> task);
  // Runs fn(i) for i in [0, n) on the pool and the calling thread; waits for all, then rethrows
  // the first exception if any task threw.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();

  std::vector<std::thread> workers_;
  std::deque<std::packaged_task<void()>> queue_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

// Waits for every future and returns the first exception any of them threw (null if none), so
// that nothing is left running when the error goes up.
std::exception_ptr wait_all(std::vector<std::future<void>>& futures);

}  // namespace tower
