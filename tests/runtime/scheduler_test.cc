// The contended-mode scheduler driven by fake task kernels: every task runs once, the critical
// path keeps program order, deferrable steps wait for their inputs, the window holds steps back,
// an error in a task stops the run and comes back to the caller, and a group's threads share
// their programs' tasks.
#include "tower/runtime/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "tower/core/error.h"

namespace tower {
namespace {

// Records when each task starts and each step finishes, on one clock of event numbers; a task of
// `slow` sleeps, one of `failing` throws.
class FakeRunner : public TaskRunner {
 public:
  explicit FakeRunner(const std::vector<TaskStep>& steps) : steps_(steps) {}

  void run_task(int step, int task, int member) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_[step].push_back(++clock_);
      ran_[{step, task}]++;
      members_[step].push_back(member);
    }
    if (step == slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (step == failing && task == 0) throw Error("task 0 of step " + std::to_string(step));
  }
  void finish_step(int step) override {
    std::lock_guard<std::mutex> lock(mutex_);
    finish_[step] = ++clock_;
    finish_order_.push_back(step);
  }
  void step_done(int step) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_[step];
  }

  void expect_every_task_once() {
    for (size_t p = 0; p < steps_.size(); ++p) {
      for (int t = 0; t < steps_[p].tasks; ++t)
        EXPECT_EQ((ran_[{static_cast<int>(p), t}]), 1) << "step " << p << " task " << t;
      EXPECT_EQ(done_[static_cast<int>(p)], 1) << "step " << p;
    }
  }
  int64_t first_start(int step) {
    return *std::min_element(start_[step].begin(), start_[step].end());
  }

  int slow = -1, failing = -1;
  std::map<int, std::vector<int64_t>> start_;
  std::map<int, int64_t> finish_;
  std::vector<int> finish_order_;
  std::map<int, std::vector<int>> members_;

 private:
  std::vector<TaskStep> steps_;
  std::mutex mutex_;
  int64_t clock_ = 0;
  std::map<std::pair<int, int>, int> ran_;
  std::map<int, int> done_;
};

std::vector<TaskStep> critical_chain(int steps, int tasks) {
  return std::vector<TaskStep>(static_cast<size_t>(steps), TaskStep{tasks, false, {}, 0});
}

// Critical steps finish in program order, and none starts before the one before it finished.
TEST(SchedulerTest, TheCriticalPathKeepsProgramOrder) {
  const std::vector<TaskStep> steps = critical_chain(6, 4);
  FakeRunner runner(steps);
  TaskScheduler scheduler(steps, runner);
  for (int run = 0; run < 3; ++run) scheduler.run(run, 2);  // set up again each time
  FakeRunner once(steps);
  TaskScheduler fresh(steps, once);
  fresh.run(0, 2);
  once.expect_every_task_once();
  EXPECT_EQ(once.finish_order_, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (int p = 1; p < 6; ++p) EXPECT_GT(once.first_start(p), once.finish_[p - 1]) << p;
}

// Step 1 (deferrable) reads step 0's output, step 3 (deferrable) reads step 1's: each starts only
// once its input is written. A slow deferrable step holds back the critical steps past the window
// (step 4 = 1 + kWindow) until it is done, while steps 2 and 3 may overtake it.
TEST(SchedulerTest, DeferrableStepsWaitForTheirInputsAndTheWindowHoldsStepsBack) {
  std::vector<TaskStep> steps = critical_chain(7, 2);
  steps[1].deferrable = true;
  steps[1].deferred_readers = {3};
  steps[3].deferrable = true;
  steps[3].deferred_inputs = 1;
  FakeRunner runner(steps);
  runner.slow = 1;
  TaskScheduler scheduler(steps, runner);
  scheduler.run(0, 2);
  runner.expect_every_task_once();
  EXPECT_GT(runner.first_start(1), runner.finish_[0]);
  EXPECT_GT(runner.first_start(3), runner.finish_[1]);
  EXPECT_GT(runner.first_start(1 + TaskScheduler::kWindow), runner.finish_[1]);
  EXPECT_LT(runner.first_start(2), runner.finish_[1]);  // the critical path went on meanwhile
}

// A task that throws stops the run: the error reaches run(), no later critical step starts, and
// the next run starts over cleanly.
TEST(SchedulerTest, AnErrorInATaskStopsTheRunAndIsRethrown) {
  const std::vector<TaskStep> steps = critical_chain(5, 3);
  FakeRunner runner(steps);
  runner.failing = 2;
  TaskScheduler scheduler(steps, runner);
  try {
    scheduler.run(0, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "task 0 of step 2");
  }
  EXPECT_EQ(runner.start_.count(3), 0u);
  EXPECT_EQ(runner.start_.count(4), 0u);
  FakeRunner again(steps);
  TaskScheduler scheduler2(steps, again);
  scheduler2.run(0, 2);
  again.expect_every_task_once();
}

// Two one-thread programs in a group, each run from its own thread: every task of both runs once
// per round, and the thread whose program is done takes the other's tasks.
TEST(SchedulerTest, AGroupsThreadsShareTheirProgramsTasks) {
  TaskGroup group(2);
  const std::vector<TaskStep> big = critical_chain(2, 8), small = critical_chain(1, 1);
  FakeRunner big_runner(big), small_runner(small);
  big_runner.slow = 0;
  TaskScheduler a(big, big_runner, &group, 0), b(small, small_runner, &group, 1);
  EXPECT_EQ(group.members, (std::vector<TaskScheduler*>{&a, &b}));
  std::thread other([&] { b.run(0, 1); });
  a.run(0, 1);
  other.join();
  big_runner.expect_every_task_once();
  small_runner.expect_every_task_once();
  const std::vector<int>& members = big_runner.members_[0];
  EXPECT_GT(std::count(members.begin(), members.end(), 1), 0) << "member 1 took none of step 0";
  EXPECT_EQ(group.finished.load(), 2);
}

}  // namespace
}  // namespace tower
