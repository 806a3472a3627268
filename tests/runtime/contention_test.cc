#include "tower/runtime/contention.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tower {
namespace {

// Two runs in a row that waited 15% or more switch contended mode on, three under 5% switch it
// off; a run between the thresholds breaks a streak.
TEST(ContentionTest, SwitchesOnAfterTwoBusyRunsAndOffAfterThreeQuietOnes) {
  bool contended = false;
  int streak = 0;
  observe_contention(20, 100, contended, streak);
  EXPECT_FALSE(contended);
  observe_contention(10, 100, contended, streak);  // 10%: neither, the streak restarts
  observe_contention(15, 100, contended, streak);
  EXPECT_FALSE(contended);
  observe_contention(50, 100, contended, streak);
  EXPECT_TRUE(contended);
  EXPECT_EQ(streak, 0);
  observe_contention(1, 100, contended, streak);
  observe_contention(1, 100, contended, streak);
  EXPECT_TRUE(contended);
  observe_contention(1, 100, contended, streak);
  EXPECT_FALSE(contended);
}

// The calling thread's wait for a core is read from its scheduler statistics: a count that never
// goes down (0 where the kernel does not keep them).
TEST(ContentionTest, RunDelayReadsTheThreadsSchedulerStatistics) {
  RunDelay delay(static_cast<int>(syscall(SYS_gettid)));
  const int64_t before = delay.nanoseconds();
  volatile double x = 0;
  for (int i = 0; i < 1000000; ++i) x = x + 1.0;
  EXPECT_GE(before, 0);
  EXPECT_GE(delay.nanoseconds(), before);
  EXPECT_EQ(RunDelay(-1).nanoseconds(), 0);
}

}  // namespace
}  // namespace tower
