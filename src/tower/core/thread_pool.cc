#include "tower/core/thread_pool.h"

#include <atomic>
#include <exception>

#include "tower/core/denormals.h"
#include "tower/core/error.h"

namespace tower {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 0) fail("thread pool size must be >= 0, got {}", num_threads);
  workers_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

std::future<void> ThreadPool::submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  auto future = packaged.get_future();
  if (workers_.empty()) {
    packaged();  // no workers: run inline
    return future;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TOWER_CHECK(!stopping_);
    queue_.push_back(std::move(packaged));
  }
  cv_.notify_one();
  return future;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  auto drain = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  int64_t helpers = std::min<int64_t>(num_threads(), n - 1);
  std::vector<std::future<void>> futures;
  futures.reserve(static_cast<size_t>(helpers));
  for (int64_t h = 0; h < helpers; ++h) futures.push_back(submit(drain));
  std::exception_ptr first;
  try {
    drain();
  } catch (...) {
    first = std::current_exception();
    next.store(n);  // stop handing out work
  }
  for (auto& f : futures) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
      next.store(n);
    }
  }
  if (first) std::rethrow_exception(first);
}

void ThreadPool::worker_loop() {
  set_denormals_are_zero(true);
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // a packaged_task stores the exception in its future
  }
}

std::exception_ptr wait_all(std::vector<std::future<void>>& futures) {
  std::exception_ptr first;
  for (auto& f : futures) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  return first;
}

}  // namespace tower
