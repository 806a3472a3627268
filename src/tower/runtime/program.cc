#include "tower/runtime/program.h"

#include <unistd.h>

#include <atomic>
#include <chrono>

#include "tower/core/allocator.h"
#include "tower/core/denormals.h"
#include "tower/core/trace.h"
#include "tower/kernels/kernel.h"
#include "tower/runtime/compiled_program.h"
#include "tower/runtime/contention.h"
#include "tower/runtime/scheduler.h"

namespace tower {

// A group's shared state. `tasks.finished` and `left` count over all rounds, so round r is done
// when they reach size * (r + 1).
struct ProgramGroup::State {
  explicit State(int size)
      : programs(static_cast<size_t>(size)), tasks(size), waits(static_cast<size_t>(size)) {}
  std::vector<Program::Impl*> programs;  // by member
  TaskGroup tasks;                       // the members' schedulers; programs done (both modes)
  ProgramOptions::Contention contention = ProgramOptions::Contention::automatic;
  std::atomic<int64_t> left{0};                   // runs returned (automatic contention)
  std::vector<std::pair<int64_t, double>> waits;  // per member: ns waited and ns run, last round
  std::atomic<bool> contended{false};             // the mode of the next round
  int streak = 0;
};

ProgramGroup::ProgramGroup(int size) : state_(std::make_unique<State>(size)) {
  TOWER_CHECK(size >= 1);
}
ProgramGroup::~ProgramGroup() = default;

struct Program::Impl : CompiledProgram, TaskRunner {
  std::unique_ptr<ProgramGroup> own_group;  // alone: a group of one (outlives the scheduler)
  bool profiling = false;
  std::unique_ptr<TaskScheduler> scheduler;                  // contended mode's, when it may run
  const std::function<void(int)>* on_fetch_ready = nullptr;  // of the run under way
  int caller_tid = 0;  // the thread whose team team_delays are
  std::vector<std::unique_ptr<RunDelay>> team_delays;
  ProgramGroup::State* group = nullptr;  // options.group's, or own_group's
  int64_t runs = 0;                      // the rounds so far

  ~Impl() {
    if (group != nullptr) group->programs[static_cast<size_t>(options.group_member)] = nullptr;
    if (stream == nullptr) return;
    // The kernels (cuDNN and cuBLAS handles bound to the stream) go first, on their GPU.
    const DeviceOps& ops = device_ops(options.device.kind);
    try {
      ops.synchronize(stream);
      ops.make_current(options.device.index);
    } catch (const std::exception&) {  // a failed GPU: free what can be freed
    }
    steps.clear();
    ops.destroy_stream(stream);
  }
  // Waits for the device's work (a no-op on CPU, where kernels return when done).
  void synchronize() const {
    if (stream != nullptr) device_ops(options.device.kind).synchronize(stream);
  }

  // run() (or a task of step s), a slice of the trace when tracing.
  template <typename Run>
  static void traced(const Step& s, Run&& run) {
    if (!trace::active()) return run();
    const auto start = trace::Clock::now();
    run();
    trace::add("kernel", s.reorder ? "Reorder" : s.node->op, start, trace::Clock::now(),
               s.node->name);
  }

  // One step on the calling thread, timed when profiling or tracing.
  void run_step(Step& s) {
    if (trace::active()) {  // on a GPU, the slices are the launches
      traced(s, [&] { s.kernel->run(s.io); });
    } else if (profiling) {
      const auto start = std::chrono::steady_clock::now();
      s.kernel->run(s.io);
      synchronize();
      s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++s.runs;
    } else {
      s.kernel->run(s.io);
    }
  }

  // Team mode: the steps in order, each on the team.
  void run_steps(const std::function<void(int)>& on_fetch_ready) {
    for (Step& s : steps) {
      run_step(s);
      if (on_fetch_ready)
        for (int f : s.ready_fetches) on_fetch_ready(f);
    }
  }

  static double ns_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
        .count();
  }

  // A round of the group in its mode (contended: the scheduler; else the steps in order, each on
  // the team), then this program's share of the group's automatic decision. A program alone is a
  // group of one.
  void run_round(const std::function<void(int)>& on_fetch_ready, bool contendable) {
    ProgramGroup::State& g = *group;
    const int64_t round = runs++;
    const bool watch = g.contention == ProgramOptions::Contention::automatic;
    const int64_t waited = watch && contendable ? team_waited_ns() : 0;
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    if (contendable && g.contended.load(std::memory_order_relaxed)) {
      this->on_fetch_ready = &on_fetch_ready;
      try {
        scheduler->run(round, options.num_threads);
      } catch (...) {
        error = std::current_exception();
      }
      ++stats.contended_runs;
    } else {
      try {
        run_steps(on_fetch_ready);
      } catch (...) {
        error = std::current_exception();
      }
      g.tasks.finished.fetch_add(1, std::memory_order_acq_rel);
      g.tasks.wake_all();
    }
    if (watch) {
      g.waits[static_cast<size_t>(options.group_member)] = {
          contendable ? team_waited_ns() - waited : 0, ns_since(start)};
      // The last member to leave the round decides the next one's mode for all.
      if (g.left.fetch_add(1, std::memory_order_acq_rel) + 1 ==
          static_cast<int64_t>(g.programs.size()) * (round + 1)) {
        int64_t waited_ns = 0;
        double run_ns = 0;
        for (const auto& [w, r] : g.waits) waited_ns += w, run_ns += r;
        bool contended_next = g.contended.load(std::memory_order_relaxed);
        observe_contention(waited_ns, run_ns, contended_next, g.streak);
        g.contended.store(contended_next, std::memory_order_relaxed);
      }
    }
    if (error) std::rethrow_exception(error);
  }

  // The scheduler's work (TaskRunner): a task of a step's kernel, then the step finished and its
  // fetches reported ready, by the member that ran its last task.
  void run_task(int step, int task, int member) override {
    Step& s = steps[static_cast<size_t>(step)];
    traced(s, [&] { s.kernel->run_task(s.io, task, member); });
  }
  void finish_step(int step) override {
    Step& s = steps[static_cast<size_t>(step)];
    s.kernel->finish_tasks(s.io);
  }
  void step_done(int step) override {
    if (on_fetch_ready != nullptr && *on_fetch_ready)
      for (int f : steps[static_cast<size_t>(step)].ready_fetches) (*on_fetch_ready)(f);
  }

  // The nanoseconds that the calling thread's team has waited for a core so far.
  int64_t team_waited_ns() {
    const int self = static_cast<int>(gettid());
    if (self != caller_tid) {
      team_delays.clear();
      for (int tid : kernel_team_tids(options.num_threads))
        team_delays.push_back(std::make_unique<RunDelay>(tid));
      caller_tid = self;
    }
    int64_t sum = 0;
    for (const auto& delay : team_delays) sum += delay->nanoseconds();
    return sum;
  }
};

// Checks that the device can run the options, joins the group, compiles (compiled_program.h).
Program::Program(const Graph& graph, std::vector<Value> fetches, VariableStore& variables,
                 ProgramOptions options, std::vector<Value> extra_targets)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  // The kernels are made for the team that will run them (oneDNN primitives keep the size).
  KernelThreadsScope threads(options.num_threads);
  check_precision_supported(options.precision, options.device);
  if (options.group != nullptr) {
    if (options.device.kind != DeviceKind::cpu || options.num_threads != 1)
      fail("a program group takes one-thread CPU programs, not {} with {} threads",
           options.device.to_string(), options.num_threads);
    m.group_size = static_cast<int>(options.group->state_->programs.size());
  } else {
    m.own_group = std::make_unique<ProgramGroup>(1);
    options.group_member = 0;
  }
  ProgramGroup::State& g =
      *(options.group != nullptr ? options.group.get() : m.own_group.get())->state_;
  const auto member = static_cast<size_t>(options.group_member);
  TOWER_CHECK(member < g.programs.size() && g.programs[member] == nullptr);
  g.programs[member] = &m;
  g.contention = options.contention;
  g.contended = options.contention == ProgramOptions::Contention::on;
  m.group = &g;
  m.options = options;
  m.fetches = fetches;
  if (options.device.kind != DeviceKind::cpu)
    m.stream = device_ops(options.device.kind).create_stream(options.device.index);
  m.compile(graph, variables, extra_targets);
  if (m.contendable_plan()) {
    std::vector<TaskStep> tasks;
    for (const Impl::Step& s : m.steps) tasks.push_back(s.schedule);
    m.scheduler =
        std::make_unique<TaskScheduler>(std::move(tasks), m, &g.tasks, options.group_member);
  }
}

Program::~Program() = default;

bool Program::has_input(Value placeholder) const {
  return impl_->owned.count(placeholder.node->id) && placeholder.node->op == "Placeholder";
}

Tensor& Program::input(Value placeholder) {
  if (!has_input(placeholder))
    fail("'{}' is not a placeholder used by this program", placeholder.name());
  return impl_->owned.at(placeholder.node->id);
}

const Tensor& Program::output(int fetch) const {
  TOWER_CHECK(fetch >= 0 && fetch < num_fetches());
  return impl_->buffers[static_cast<size_t>(impl_->fetch_buffers[static_cast<size_t>(fetch)])].view;
}

int Program::num_fetches() const { return static_cast<int>(impl_->fetches.size()); }

void Program::run(uint64_t step, const std::function<void(int)>& on_fetch_ready) {
  Impl& m = *impl_;
  KernelThreadsScope threads(m.options.num_threads);
  DenormalsAreZero denormals;
  zero_denormals_on_team(m.options.num_threads);
  if (m.stream != nullptr) device_ops(m.options.device.kind).make_current(m.options.device.index);
  if (on_fetch_ready)
    for (int f : m.source_fetches) on_fetch_ready(f);
  for (Impl::Step& s : m.steps) s.io.step = step;
  m.run_round(on_fetch_ready, m.scheduler != nullptr && !m.profiling);
  m.synchronize();
}

void Program::synchronize() const { impl_->synchronize(); }

void Program::set_profiling(bool on) {
  impl_->profiling = on;
  for (Impl::Step& s : impl_->steps) s.seconds = 0, s.runs = 0;
}

std::vector<KernelTime> Program::profile() const {
  std::vector<KernelTime> out;
  for (const Impl::Step& s : impl_->steps)
    out.push_back({s.node->name, s.reorder ? "Reorder" : s.node->op, s.seconds, s.runs});
  return out;
}
void* Program::stream() const { return impl_->stream; }

const ProgramStats& Program::stats() const { return impl_->stats; }
std::string Program::placement_log() const { return impl_->placement; }

std::vector<Tensor> run_once(const Graph& graph, const std::vector<Value>& fetches,
                             VariableStore& variables,
                             const std::vector<std::pair<Value, const Tensor*>>& feeds,
                             int num_threads) {
  Program program(graph, fetches, variables, {Device{}, num_threads});
  for (auto& [placeholder, tensor] : feeds)
    if (program.has_input(placeholder)) program.input(placeholder).copy_from(*tensor);
  program.run();
  std::vector<Tensor> result;
  for (int i = 0; i < program.num_fetches(); ++i) result.push_back(program.output(i).clone());
  return result;
}

}  // namespace tower
