#include "tower/runtime/scheduler.h"

#include <fmt/format.h>

#include "tower/core/error.h"
#include "tower/core/trace.h"
#include "tower/kernels/kernel.h"

namespace tower {

void TaskGroup::wake_all() {
  epoch.fetch_add(1, std::memory_order_acq_rel);
  epoch.notify_all();
}

TaskScheduler::TaskScheduler(std::vector<TaskStep> steps, TaskRunner& runner, TaskGroup* group,
                             int member)
    : steps_(std::move(steps)),
      runner_(runner),
      own_group_(group == nullptr ? std::make_unique<TaskGroup>(1) : nullptr),
      group_(group != nullptr ? group : own_group_.get()),
      member_(member),
      taken_(std::make_unique<std::atomic<int>[]>(steps_.size())),
      done_(std::make_unique<std::atomic<int>[]>(steps_.size())),
      waiting_(steps_.size()),
      reached_(steps_.size()),
      finished_(steps_.size()) {
  for (const TaskStep& s : steps_) deferrable_ += s.deferrable ? 1 : 0;
  TOWER_CHECK(member_ >= 0 && member_ < static_cast<int>(group_->members.size()));
  group_->members[static_cast<size_t>(member_)] = this;
}

TaskScheduler::~TaskScheduler() { group_->members[static_cast<size_t>(member_)] = nullptr; }

void TaskScheduler::run(int64_t round, int threads) {
  TOWER_CHECK(threads == 1 || group_->members.size() == 1);
  set_up();
  round_.store(round, std::memory_order_release);
  wake_all();
  if (threads <= 1) {
    work(member_, round);
  } else {
    run_on_team(threads, [&](int t) {
      if (t > 0 && trace::active()) trace::name_thread(fmt::format("team member {}", t));
      work(member_ * threads + t, round);
    });
  }
  rethrow();
}

void TaskScheduler::set_up() {
  failed_ = false;
  deferred_left_ = deferrable_;
  for (size_t p = 0; p < steps_.size(); ++p) {
    taken_[p] = 0;
    done_[p] = 0;
    waiting_[p] = steps_[p].deferred_inputs;
    reached_[p] = 0;
    finished_[p] = 0;
  }
  prefix_ = 0;
  ready_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  counted_ = false;
  advance(-1);
  count_if_done();
}

void TaskScheduler::rethrow() {
  if (error_) {
    std::exception_ptr error;
    std::swap(error, error_);
    std::rethrow_exception(error);
  }
}

// A thread's part of a round: its own program's critical step first, then the others' (of this
// round), then deferrable steps, its own first; until every program of the round is done.
void TaskScheduler::work(int member, int64_t round) {
  TaskGroup& g = *group_;
  const int64_t all_done = static_cast<int64_t>(g.members.size()) * (round + 1);
  auto take_from_others = [&](bool (TaskScheduler::*take)(int)) {
    for (TaskScheduler* other : g.members)
      if (other != nullptr && other != this &&
          other->round_.load(std::memory_order_acquire) == round && (other->*take)(member))
        return true;
    return false;
  };
  for (;;) {
    const uint32_t epoch = g.epoch.load(std::memory_order_acquire);
    if (take_critical(member) || take_from_others(&TaskScheduler::take_critical) ||
        take_deferred(member) || take_from_others(&TaskScheduler::take_deferred))
      continue;
    if (g.finished.load(std::memory_order_acquire) >= all_done) return;
    wait_for_work(g.epoch, epoch);
  }
}

// A short spin, then sleep until another member makes work.
void TaskScheduler::wait_for_work(std::atomic<uint32_t>& epoch, uint32_t seen) {
  for (int i = 0; i < 2000; ++i) {
    __builtin_ia32_pause();
    if (epoch.load(std::memory_order_acquire) != seen) return;
  }
  epoch.wait(seen, std::memory_order_acquire);
}

// Runs a task of the critical step if one is left.
bool TaskScheduler::take_critical(int member) {
  if (failed_.load(std::memory_order_acquire)) return false;
  const int p = cursor_.load(std::memory_order_acquire);
  return p < static_cast<int>(steps_.size()) && in_window(p) && take(p, member);
}

// Runs a task of a deferrable step that may run, if one is left.
bool TaskScheduler::take_deferred(int member) {
  if (failed_.load(std::memory_order_acquire)) return false;
  int d = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!ready_.empty() && taken_[static_cast<size_t>(ready_.front())].load() >=
                                  steps_[static_cast<size_t>(ready_.front())].tasks)
      ready_.pop_front();
    for (size_t i = 0; i < ready_.size() && d < 0; ++i) {
      const int q = ready_[i];
      if (in_window(q) &&
          taken_[static_cast<size_t>(q)].load() < steps_[static_cast<size_t>(q)].tasks)
        d = q;
    }
  }
  if (d < 0) return false;
  take(d, member);
  return true;
}

// Runs a task of step p if one is left (see run_task_of). The last thread to leave a program that
// is done counts it done, so that its run returns only when nobody is still inside its steps or
// their callbacks.
bool TaskScheduler::take(int p, int member) {
  busy_.fetch_add(1, std::memory_order_acq_rel);
  const bool took = run_task_of(p, member);
  if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    bool counted = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counted = count_if_done();
    }
    if (counted) wake_all();
  }
  return took;
}

// Runs a task of step p if one is left. The member that finishes the last one finishes the step,
// wakes the others to the work it made ready, then reports the step done.
bool TaskScheduler::run_task_of(int p, int member) {
  const TaskStep& s = steps_[static_cast<size_t>(p)];
  const int task = taken_[static_cast<size_t>(p)].fetch_add(1, std::memory_order_acq_rel);
  if (task >= s.tasks) return false;
  try {
    runner_.run_task(p, task, member);
    if (done_[static_cast<size_t>(p)].fetch_add(1, std::memory_order_acq_rel) + 1 < s.tasks)
      return true;
    runner_.finish_step(p);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_[static_cast<size_t>(p)] = 1;
      int prefix = prefix_.load(std::memory_order_relaxed);
      while (prefix < static_cast<int>(steps_.size()) && finished_[static_cast<size_t>(prefix)])
        ++prefix;
      prefix_.store(prefix, std::memory_order_release);
      if (s.deferrable) {
        --deferred_left_;
        for (int r : s.deferred_readers)
          if (--waiting_[static_cast<size_t>(r)] == 0 && reached_[static_cast<size_t>(r)])
            ready_.push_back(r);
      } else {
        advance(p);
      }
    }
    wake_all();
    runner_.step_done(p);
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
    }
    wake_all();
  }
  return true;
}

bool TaskScheduler::in_window(int p) const {
  return p < prefix_.load(std::memory_order_acquire) + kWindow;
}

// With the mutex held: counts this program done for the round once every step has run (or one
// failed) and no thread is inside a task; true when it counted it now.
bool TaskScheduler::count_if_done() {
  if (counted_ || busy_.load(std::memory_order_acquire) != 0) return false;
  if (!failed_ && !all_run()) return false;
  counted_ = true;
  group_->finished.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

// With the mutex held: every step of the run is done.
bool TaskScheduler::all_run() const {
  return cursor_.load() >= static_cast<int>(steps_.size()) && deferred_left_ == 0;
}

void TaskScheduler::wake_all() { group_->wake_all(); }

// With the mutex held, after critical step p (-1: at the start): the deferrable steps up to the
// next critical one are reached, and may run once their inputs are written.
void TaskScheduler::advance(int p) {
  int q = p + 1;
  for (; q < static_cast<int>(steps_.size()) && steps_[static_cast<size_t>(q)].deferrable; ++q) {
    reached_[static_cast<size_t>(q)] = 1;
    if (waiting_[static_cast<size_t>(q)] == 0) ready_.push_back(q);
  }
  cursor_.store(q, std::memory_order_release);
}

}  // namespace tower
