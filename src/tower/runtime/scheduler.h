// Contended mode's task scheduler (ProgramOptions::contention). A program's steps are kernels cut
// into tasks (Kernel::tasks: chunks of batch rows, or the whole kernel). The critical path is the
// steps in program order; deferrable steps (weight gradients that nothing in the step reads) may
// run whenever their inputs are written. Each member thread takes a task of the critical step,
// else of a deferrable step that may run, and waits only when there is neither.
//
// A step's states: not reached (the critical path is before it), reached (a deferrable step whose
// inputs are not all written yet), ready (its tasks may be taken), finished (its last task ran;
// the member that ran it finishes the step). Positions are step indices in program order; the
// window: step p may start only when every step before p - kWindow + 1 has finished, so that the
// memory plan may reuse a buffer kWindow steps after its last reader.
//
// Programs run in a TaskGroup, one round at a time, each from its own thread and that thread's
// kernel team; every thread also takes the tasks of the group's other programs of the same round.
// A group holds a process's one-thread CPU towers, or one program alone (a group of its own, run
// by its whole team): one path for both.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace tower {

// A step as the scheduler sees it.
struct TaskStep {
  int tasks = 1;
  bool deferrable = false;
  std::vector<int> deferred_readers;  // deferrable steps that read one of its outputs
  int deferred_inputs = 0;            // its inputs that deferrable steps write
};

// The work the scheduler hands out: a program's kernels. Called from any member thread.
class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  virtual void run_task(int step, int task, int member) = 0;
  // By the member that ran the step's last task: before the step counts as finished, then after
  // the members were woken to the work it made ready.
  virtual void finish_step(int step) = 0;
  virtual void step_done(int step) = 0;
};

class TaskScheduler;

// The schedulers of programs that run at once, one round at a time.
struct TaskGroup {
  explicit TaskGroup(int size) : members(static_cast<size_t>(size), nullptr) {}
  std::vector<TaskScheduler*> members;  // by member; null when not (yet) built
  std::atomic<uint32_t> epoch{0};       // bumped (and waited on) when there is new work
  std::atomic<int64_t> finished{0};     // programs done, over all rounds: round r is done at
                                        // members.size() * (r + 1)
  void wake_all();
};

class TaskScheduler {
 public:
  static constexpr int kWindow = 3;

  // `group`: the group whose member `member` this program is (registered there until destroyed);
  // null: a group of its own.
  TaskScheduler(std::vector<TaskStep> steps, TaskRunner& runner, TaskGroup* group = nullptr,
                int member = 0);
  ~TaskScheduler();
  TaskScheduler(const TaskScheduler&) = delete;
  TaskScheduler& operator=(const TaskScheduler&) = delete;

  // Round `round` of this program (its runs count 0, 1, ..., whether the scheduler ran them or
  // not: see TaskGroup::finished) on `threads` threads, the calling thread's kernel team (1 in a
  // group of several), which also take tasks of the group's other programs until every program
  // of the round is done. The first exception a task throws is rethrown here, once every thread
  // has stopped. Tasks see member ids member * threads + team thread.
  void run(int64_t round, int threads);

 private:
  void set_up();
  void rethrow();
  void work(int member, int64_t round);
  static void wait_for_work(std::atomic<uint32_t>& epoch, uint32_t seen);
  bool take_critical(int member);
  bool take_deferred(int member);
  bool take(int p, int member);
  bool run_task_of(int p, int member);
  bool in_window(int p) const;
  bool count_if_done();
  bool all_run() const;
  void wake_all();
  void advance(int p);

  std::vector<TaskStep> steps_;
  TaskRunner& runner_;
  std::unique_ptr<TaskGroup> own_group_;  // alone: a group of one
  TaskGroup* group_;
  int member_;
  int deferrable_ = 0;
  std::atomic<int> cursor_{0};  // the critical step whose tasks are taken now; size: done
  std::unique_ptr<std::atomic<int>[]> taken_, done_;  // per step: tasks taken, tasks done
  std::atomic<bool> failed_{false};
  std::atomic<int64_t> round_{-1};  // the round being run, once set up
  std::atomic<int> busy_{0};        // members inside take()
  std::atomic<int> prefix_{0};      // every step before it has finished (the window)
  std::mutex mutex_;                // guards the rest
  bool counted_ = false;            // counted in TaskGroup::finished
  std::vector<int> waiting_;        // per step: deferrable inputs not yet written
  std::vector<char> reached_;       // per step: the critical path has passed it
  std::vector<char> finished_;      // per step
  std::deque<int> ready_;           // deferrable steps whose tasks may be taken
  int deferred_left_ = 0;           // deferrable steps not finished
  std::exception_ptr error_;
};

}  // namespace tower
