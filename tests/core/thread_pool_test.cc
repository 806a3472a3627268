#include "tower/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "tower/core/denormals.h"
#include "tower/core/error.h"

namespace tower {

// A product below the smallest normal float: subnormal in the default mode, zero with
// DenormalsAreZero (and a subnormal input reads as zero); the scope restores the mode.
TEST(DenormalsTest, ScopeFlushesSubnormalsAndRestoresTheMode) {
  volatile float tiny = 1e-30f, scale = 1e-10f;  // (volatile: computed at run time)
  ASSERT_FALSE(denormals_are_zero());
  EXPECT_GT(tiny * scale, 0.0f);
  volatile float subnormal = tiny * scale;
  {
    DenormalsAreZero scope;
    EXPECT_TRUE(denormals_are_zero());
    EXPECT_EQ(tiny * scale, 0.0f);
    EXPECT_EQ(subnormal * 1.0f, 0.0f);
  }
  EXPECT_FALSE(denormals_are_zero());
  EXPECT_GT(tiny * scale, 0.0f);
}

// Tower's pools compute in that mode whatever their creator's.
TEST(DenormalsTest, PoolThreadsHaveSubnormalsAsZero) {
  ThreadPool pool(2);
  for (int i = 0; i < 4; ++i) pool.submit([] { EXPECT_TRUE(denormals_are_zero()); }).get();
}

TEST(ThreadPoolTest, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t i) {
                                   if (i == 57) fail("task {} failed", i);
                                 }),
               Error);
  auto future = pool.submit([] { throw std::runtime_error("boom"); });
  EXPECT_THROW(future.get(), std::runtime_error);
  // The pool still works after a failure.
  std::atomic<int> sum{0};
  pool.parallel_for(10, [&](int64_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum.load(), 45);
}

TEST(ThreadPoolTest, ZeroThreadsRunsInline) {
  ThreadPool pool(0);
  int sum = 0;
  pool.parallel_for(4, [&](int64_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum, 6);
  pool.submit([&] { sum = -1; }).get();
  EXPECT_EQ(sum, -1);
}

TEST(ThreadPoolTest, WaitAllWaitsForEveryTaskAndReturnsTheFirstError) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  std::vector<std::future<void>> futures;
  futures.push_back(pool.submit([&] { ++done; }));
  futures.push_back(pool.submit([&] {
    ++done;
    throw std::runtime_error("first");
  }));
  futures.push_back(pool.submit([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++done;
    throw std::runtime_error("second");
  }));
  std::exception_ptr error = wait_all(futures);
  EXPECT_EQ(done.load(), 3);
  ASSERT_TRUE(error);
  try {
    std::rethrow_exception(error);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  std::vector<std::future<void>> fine;
  fine.push_back(pool.submit([] {}));
  EXPECT_FALSE(wait_all(fine));
}

}  // namespace tower
