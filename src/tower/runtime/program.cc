#include "tower/runtime/program.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>

#include "tower/core/allocator.h"
#include "tower/core/trace.h"
#include "tower/kernels/kernel.h"
#include "tower/runtime/contention.h"
#include "tower/runtime/fusion.h"
#include "tower/runtime/memory_plan.h"
#include "tower/runtime/scheduler.h"

namespace tower {

using Block = MemoryBlock;

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

struct Program::Impl : TaskRunner {
  // One buffer of a value: as its producer wrote it, or a copy converted into another layout.
  struct Buffer {
    Value value;
    Layout layout;
    bool external = false;  // a variable's, placeholder's or constant's own storage
    bool unused = false;    // its producer writes the converted copy instead (fold_conversions)
    int alias = -1;         // a Reshape's output: the buffer whose bytes it is (plan_memory)
    Block block;            // in the arena, when not external
    Tensor view;
  };
  struct Step {
    const Node* node = nullptr;  // for a reorder, the node of the converted value
    bool reorder = false;
    double seconds = 0;  // profiling
    int64_t runs = 0;
    std::unique_ptr<Kernel> kernel;
    std::vector<int> inputs, outputs;  // buffer indices
    KernelIO io;
    std::vector<int> ready_fetches;     // fetch indices completed by this step
    bool deferrable = false;            // off the critical path (mark_deferrable)
    std::vector<int> deferred_readers;  // deferrable steps that read an output (one per input)
    int deferred_inputs = 0;            // inputs written by deferrable steps
    int tasks = 1;                      // Kernel::tasks()
  };
  ProgramOptions options;
  void* stream = nullptr;  // a GPU's in-order queue for this program's kernels
  std::vector<Step> steps;
  std::vector<Buffer> buffers;
  // (node id, output) -> its buffers; the first is the one consumers are offered.
  std::map<std::pair<int, int>, std::vector<int>> versions;
  std::map<int, Tensor> owned;  // placeholder/constant node id -> storage
  std::vector<Value> fetches;
  std::vector<int> fetch_buffers;   // plain buffer of each fetch
  std::vector<int> source_fetches;  // fetches that are variables/placeholders
  Tensor arena;
  std::vector<Block> scratch_blocks;  // per step
  ProgramStats stats;
  std::vector<char> absorbed;                  // node id -> run inside a fused kernel
  std::map<int, std::unique_ptr<Node>> fused;  // last node id of a chain -> its fused node
  // A fused node whose outputs are several nodes' (siblings): the value each output is.
  std::map<int, std::vector<Value>> fused_outputs;
  bool profiling = false;
  std::string placement;
  std::unique_ptr<TaskScheduler> scheduler;                  // contended mode's, when it may run
  const std::function<void(int)>* on_fetch_ready = nullptr;  // of the run under way
  bool contended = false;                                    // the mode of the next run
  int streak = 0;      // runs in a row that asked for the other mode
  int caller_tid = 0;  // the thread whose team team_delays are
  std::vector<std::unique_ptr<RunDelay>> team_delays;
  ProgramGroup::State* group = nullptr;  // options.group's
  int64_t runs = 0;                      // in a group: the rounds so far
  bool taskable = false;  // contended mode may run: a CPU program whose kernels all have tasks

  // Contended mode may run (mark_deferrable decides): the memory plan allows for it.
  bool contendable_plan() const { return taskable && (stats.deferrable > 0 || group != nullptr); }

  // The threads that may take this program's tasks (KernelContext::members).
  int members() const {
    return group != nullptr ? static_cast<int>(group->programs.size()) : options.num_threads;
  }

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

  static std::pair<int, int> key(const Value& v) { return {v.node->id, v.index}; }

  int add_buffer(const Value& v, Layout layout, int producer) {
    Buffer b{v, std::move(layout)};
    b.block.first = b.block.last = producer;
    buffers.push_back(std::move(b));
    versions[key(v)].push_back(static_cast<int>(buffers.size()) - 1);
    return static_cast<int>(buffers.size()) - 1;
  }

  // The buffer of `v` in `layout`: an existing version, or a new one filled by a reorder step
  // scheduled now (before the step that asked).
  int buffer_in(const Value& v, const Layout& layout) {
    const std::vector<int>& have = versions.at(key(v));
    for (int b : have)
      if (buffers[static_cast<size_t>(b)].layout == layout) return b;
    const int from = have.front();
    const ReorderFactory* factory = find_reorder(options.device.kind);
    if (factory == nullptr)
      fail("{}: no layout conversion on {}", v.name(), options.device.to_string());
    Step step;
    step.node = v.node;
    step.reorder = true;
    step.kernel = (*factory)(v, buffers[static_cast<size_t>(from)].layout, layout);
    step.inputs = {from};
    step.outputs = {add_buffer(v, layout, static_cast<int>(steps.size()))};
    steps.push_back(std::move(step));
    ++stats.reorders;
    return steps.back().outputs[0];
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

  // A group member's run in the round's mode, then its share of the group's automatic decision.
  void run_in_group(const std::function<void(int)>& on_fetch_ready, bool contendable) {
    ProgramGroup::State& g = *group;
    const int64_t round = runs++;
    const bool watch = g.contention == ProgramOptions::Contention::automatic;
    const int64_t waited = watch ? team_waited_ns() : 0;
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    if (contendable && g.contended.load(std::memory_order_relaxed)) {
      this->on_fetch_ready = &on_fetch_ready;
      try {
        scheduler->run_in_group(round);
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
      g.waits[static_cast<size_t>(options.group_member)] = {team_waited_ns() - waited,
                                                            ns_since(start)};
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

  // 1. The nodes needed for the fetches and targets (ids are topological: inputs come first).
  static std::vector<char> needed_nodes(const Graph& graph, const std::vector<Value>& fetches,
                                        const std::vector<Value>& extra_targets) {
    std::vector<char> needed(graph.nodes().size(), 0);
    std::vector<const Node*> stack;
    for (const Value& v : fetches) stack.push_back(v.node);
    for (const Value& v : extra_targets) stack.push_back(v.node);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (needed[static_cast<size_t>(n->id)]) continue;
      needed[static_cast<size_t>(n->id)] = 1;
      for (const Value& in : n->inputs) stack.push_back(in.node);
    }
    return needed;
  }

  // 1b. Fusion (fusion.h): chains and siblings that one kernel computes become one node.
  void plan_fusion(const Graph& graph, const std::vector<char>& needed) {
    absorbed.assign(graph.nodes().size(), 0);
    if (!options.fuse) return;
    FusionPlan plan = tower::plan_fusion(graph, needed, fetches, options.device.kind);
    absorbed = std::move(plan.absorbed);
    fused = std::move(plan.fused);
    fused_outputs = std::move(plan.fused_outputs);
    stats.fused_nodes += plan.fused_nodes;
  }

  // The value that output o of a kernel's node is (a sibling fusion's outputs are other nodes').
  Value output_value(const Node& node, int o) const {
    auto it = fused_outputs.find(node.id);
    if (it != fused_outputs.end()) return it->second[static_cast<size_t>(o)];
    return Value{const_cast<Node*>(&node), o};
  }

  // 2. A source gets its own storage; every other node gets a kernel, built knowing the layouts
  // its inputs come in, preceded by the reorders into the layouts it reads. Fetched values get a
  // plain buffer right after their producer, so that reducers may start on them at once.
  void add_node(const Node& node, VariableStore& variables) {
    placement += fmt::format("{} ({}) -> {}\n", node.name, node.op, options.device.to_string());
    Tensor source;
    if (node.op == "Variable") {
      source = variables.get(node.attr<VariableAttrs>().name).view();
    } else if (node.op == "Placeholder") {
      const TensorSpec& spec = node.outputs[0];
      source = owned.emplace(node.id, Tensor(spec.shape, spec.dtype, options.device))
                   .first->second.view();
    } else if (node.op == "Constant") {
      const auto& a = node.attr<ConstantAttrs>();
      Tensor host(a.spec.shape, a.spec.dtype);
      std::fill_n(host.data<float>(), host.numel(), a.value);
      auto& t =
          owned.emplace(node.id, Tensor(a.spec.shape, a.spec.dtype, options.device)).first->second;
      t.copy_from(host);
      source = t.view();
    } else {
      if (absorbed[static_cast<size_t>(node.id)]) return;
      auto chain = fused.find(node.id);
      add_kernel(chain != fused.end() ? *chain->second : node);
      return;
    }
    int b = add_buffer(Value{const_cast<Node*>(&node), 0}, Layout{}, -1);
    buffers[static_cast<size_t>(b)].external = true;
    buffers[static_cast<size_t>(b)].view = std::move(source);
  }

  void add_kernel(const Node& node) {
    const KernelFactory* factory = find_kernel(node.op, options.device.kind);
    if (factory == nullptr)
      fail("{} ({}): no kernel for op {} on {}", node.name, node.op, node.op,
           options.device.to_string());
    KernelContext context{options.device,        options.num_threads, stream,   {},
                          options.deterministic, options.precision,   members()};
    for (const Value& in : node.inputs)
      context.input_layouts.push_back(
          buffers[static_cast<size_t>(versions.at(key(in)).front())].layout);
    Step step;
    step.node = &node;
    step.kernel = (*factory)(node, context);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      step.inputs.push_back(
          buffer_in(node.inputs[i], step.kernel->input_layout(static_cast<int>(i))));
    const int position = static_cast<int>(steps.size());
    for (size_t o = 0; o < node.outputs.size(); ++o)
      step.outputs.push_back(add_buffer(output_value(node, static_cast<int>(o)),
                                        step.kernel->output_layout(static_cast<int>(o)), position));
    steps.push_back(std::move(step));
    ++stats.num_kernels;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const Value v = output_value(node, static_cast<int>(o));
      int b = versions.at(key(v)).front();
      if (buffers[static_cast<size_t>(b)].layout.is_plain()) continue;
      if (!options.propagate_layouts) {
        // Every value plain between kernels: consumers see only the plain copy.
        versions.at(key(v)) = {buffer_in(v, Layout{})};
      } else if (std::any_of(fetches.begin(), fetches.end(),
                             [&](const Value& f) { return key(f) == key(v); })) {
        buffer_in(v, Layout{});
      }
    }
  }

  // 2b. A conversion whose input nothing else reads (not fetched either) is folded into the input's
  // producer when that kernel can write the converted layout itself (Kernel::write_output_as):
  // one pass over the data instead of two.
  void fold_conversions() {
    if (!options.fuse) return;
    std::vector<int> readers(buffers.size(), 0), producer(buffers.size(), -1);
    for (size_t p = 0; p < steps.size(); ++p) {
      for (int b : steps[p].inputs) ++readers[static_cast<size_t>(b)];
      for (int b : steps[p].outputs) producer[static_cast<size_t>(b)] = static_cast<int>(p);
    }
    std::vector<char> dropped(steps.size(), 0);
    for (size_t r = 0; r < steps.size(); ++r) {
      Step& conversion = steps[r];
      if (!conversion.reorder) continue;
      const int from = conversion.inputs[0];
      const int p = producer[static_cast<size_t>(from)];
      const Value& v = buffers[static_cast<size_t>(from)].value;
      if (p < 0 || steps[static_cast<size_t>(p)].reorder ||
          readers[static_cast<size_t>(from)] != 1 ||
          std::any_of(fetches.begin(), fetches.end(), [&](const Value& f) { return f == v; }))
        continue;
      Step& writer = steps[static_cast<size_t>(p)];
      const auto o = static_cast<size_t>(
          std::find(writer.outputs.begin(), writer.outputs.end(), from) - writer.outputs.begin());
      const int to = conversion.outputs[0];
      if (!writer.kernel->write_output_as(static_cast<int>(o),
                                          buffers[static_cast<size_t>(to)].layout))
        continue;
      writer.outputs[o] = to;
      buffers[static_cast<size_t>(from)].unused = true;
      dropped[r] = 1;
      --stats.reorders;
      ++stats.folded_conversions;
    }
    std::vector<Step> kept;
    for (size_t i = 0; i < steps.size(); ++i)
      if (!dropped[i]) kept.push_back(std::move(steps[i]));
    steps = std::move(kept);
    for (size_t p = 0; p < steps.size(); ++p)  // positions moved up
      for (int b : steps[p].outputs) {
        Block& block = buffers[static_cast<size_t>(b)].block;
        block.first = block.last = static_cast<int>(p);
      }
  }

  // 2c. The steps that contended mode may defer (ProgramOptions::contention), on a CPU team of 2
  // or more: those whose outputs are fetched or read, and read only by deferrable steps (the
  // weight gradients, their conversions and weight decay terms).
  void mark_deferrable() {
    if (options.device.kind != DeviceKind::cpu || members() < 2 ||
        options.contention == ProgramOptions::Contention::off)
      return;
    for (Step& step : steps)
      if ((step.tasks = step.kernel->tasks()) < 1) return;  // a kernel needs the team
    taskable = true;
    std::vector<std::vector<int>> readers(buffers.size());
    std::vector<int> producer(buffers.size(), -1);
    std::vector<char> fetched(buffers.size(), 0);
    for (size_t p = 0; p < steps.size(); ++p) {
      for (int b : steps[p].inputs) readers[static_cast<size_t>(b)].push_back(static_cast<int>(p));
      for (int b : steps[p].outputs) producer[static_cast<size_t>(b)] = static_cast<int>(p);
    }
    for (const Value& f : fetches)
      for (int b : versions.at(key(f))) fetched[static_cast<size_t>(b)] = 1;
    for (size_t p = steps.size(); p-- > 0;) {  // readers come later
      Step& step = steps[p];
      step.deferrable = !step.outputs.empty() &&
                        std::all_of(step.outputs.begin(), step.outputs.end(), [&](int b) {
                          const auto& r = readers[static_cast<size_t>(b)];
                          return (fetched[static_cast<size_t>(b)] || !r.empty()) &&
                                 std::all_of(r.begin(), r.end(), [&](int q) {
                                   return steps[static_cast<size_t>(q)].deferrable;
                                 });
                        });
    }
    for (size_t p = 0; p < steps.size(); ++p) {
      Step& step = steps[p];
      if (!step.deferrable) continue;
      ++stats.deferrable;
      for (int b : step.inputs)
        if (const int q = producer[static_cast<size_t>(b)];
            q >= 0 && steps[static_cast<size_t>(q)].deferrable) {
          steps[static_cast<size_t>(q)].deferred_readers.push_back(static_cast<int>(p));
          ++step.deferred_inputs;
        }
    }
  }

  // 3. Memory plan: one block per buffer and per scratchpad, alive from its producer to its last
  // reader (plus kWindow - 1 steps where contended mode may run; fetches to the end of the step),
  // placed in one arena.
  void plan_memory() {
    const int end = static_cast<int>(steps.size());
    const int window = contendable_plan() ? TaskScheduler::kWindow : 1;
    scratch_blocks.assign(steps.size(), Block{});
    for (int p = 0; p < end; ++p) {
      const Step& step = steps[static_cast<size_t>(p)];
      // In contended mode a step may run beside the kWindow - 1 steps after it (in_window).
      const int last = std::min(p + window - 1, end);
      for (int b : step.inputs) {
        Block& block = buffers[static_cast<size_t>(b)].block;
        block.last = std::max(block.last, last);
      }
      scratch_blocks[static_cast<size_t>(p)] =
          Block{align_up(step.kernel->scratch_bytes()), p, last};
    }
    for (const Value& f : fetches) {
      int b = buffer_in(f, Layout{});  // exists: sources are plain, add_kernel made the others
      fetch_buffers.push_back(b);
      buffers[static_cast<size_t>(b)].block.last = end;
    }
    TOWER_CHECK(static_cast<int>(steps.size()) == end);
    alias_reshapes();
    std::vector<Block*> blocks;
    for (Buffer& b : buffers) {
      if (b.external || b.unused || b.alias >= 0) continue;
      b.block.bytes = align_up(std::max<size_t>(b.layout.bytes(b.value.spec()), 1));
      blocks.push_back(&b.block);
      stats.unplanned_bytes += b.block.bytes;
    }
    for (auto& b : scratch_blocks)
      if (b.bytes > 0) blocks.push_back(&b);
    stats.arena_bytes = place_blocks(blocks);
    arena = Tensor(Shape{static_cast<int64_t>(std::max<size_t>(stats.arena_bytes, 1))}, DType::u8,
                   options.device);
    auto* base = static_cast<char*>(arena.raw_data());
    for (Buffer& b : buffers)
      if (!b.external && !b.unused)
        b.view = Tensor::wrap(
            base + (b.alias >= 0 ? buffers[static_cast<size_t>(b.alias)] : b).block.offset,
            b.value.shape(), b.value.dtype(), options.device);
  }

  // A Reshape of a plain buffer in the arena reads and writes the same bytes: its output is that
  // buffer (the kernel sees one pointer and copies nothing), which then lives as long as either.
  // Values are written once, by their producer, so the two never differ.
  void alias_reshapes() {
    for (const Step& step : steps) {
      if (step.reorder || step.node->op != "Reshape") continue;
      Buffer& out = buffers[static_cast<size_t>(step.outputs[0])];
      const Buffer& in = buffers[static_cast<size_t>(step.inputs[0])];
      if (in.external || in.unused || out.unused || !in.layout.is_plain() ||
          !out.layout.is_plain() || in.value.dtype() != out.value.dtype())
        continue;
      out.alias = in.alias >= 0 ? in.alias : step.inputs[0];
      Block& root = buffers[static_cast<size_t>(out.alias)].block;
      root.last = std::max(root.last, out.block.last);
    }
  }

  // 4. Every kernel bound to its buffers, once; each fetch marked ready after its producer.
  void bind_kernels() {
    auto* base = static_cast<char*>(arena.raw_data());
    for (size_t p = 0; p < steps.size(); ++p) {
      Step& step = steps[p];
      for (int b : step.inputs)
        step.io.inputs.push_back(buffers[static_cast<size_t>(b)].view.view());
      for (int b : step.outputs)
        step.io.outputs.push_back(buffers[static_cast<size_t>(b)].view.view());
      const Block& s = scratch_blocks[p];
      step.io.scratch = s.bytes > 0 ? base + s.offset : nullptr;
      step.kernel->bind(step.io);
    }
    for (size_t i = 0; i < fetches.size(); ++i) {
      const Buffer& b = buffers[static_cast<size_t>(fetch_buffers[i])];
      if (b.external) {
        source_fetches.push_back(static_cast<int>(i));
        continue;
      }
      steps[static_cast<size_t>(b.block.first)].ready_fetches.push_back(static_cast<int>(i));
    }
  }
};

// Compiling a graph for one device, in four stages (Impl::needed_nodes, add_node, plan_memory,
// bind_kernels).
Program::Program(const Graph& graph, std::vector<Value> fetches, VariableStore& variables,
                 ProgramOptions options, std::vector<Value> extra_targets)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  // The kernels are made for the team that will run them (oneDNN primitives keep the size).
  KernelThreadsScope threads(options.num_threads);
  if (options.precision == Precision::bf16 && options.device.kind == DeviceKind::cuda) {
    for (const CudaDeviceInfo& gpu : cuda_devices())
      if (gpu.index == options.device.index && gpu.major < 8)
        fail(
            "--precision bf16 needs a GPU of compute capability 8.0 or later (bf16 tensor cores), "
            "and {} ({}) is {}.{}: use --precision fp32",
            options.device.to_string(), gpu.name, gpu.major, gpu.minor);
  } else if (options.precision == Precision::bf16) {
    const CpuInfo cpu = cpu_info();
    if (!cpu.avx512_bf16 && !cpu.amx)
      fail(
          "--precision bf16 needs a CPU with AVX512-BF16 or AMX instructions, and this one ({}) "
          "has neither: use --precision fp32",
          cpu.model_name.empty() ? std::string("unknown") : cpu.model_name);
  }
  m.options = options;
  m.contended = options.contention == ProgramOptions::Contention::on;
  if (options.group != nullptr) {
    ProgramGroup::State& g = *options.group->state_;
    if (options.device.kind != DeviceKind::cpu || options.num_threads != 1)
      fail("a program group takes one-thread CPU programs, not {} with {} threads",
           options.device.to_string(), options.num_threads);
    const auto member = static_cast<size_t>(options.group_member);
    TOWER_CHECK(member < g.programs.size() && g.programs[member] == nullptr);
    g.programs[member] = &m;
    g.contention = options.contention;
    g.contended = options.contention == ProgramOptions::Contention::on;
    m.group = &g;
  }
  m.fetches = fetches;
  if (options.device.kind != DeviceKind::cpu)
    m.stream = device_ops(options.device.kind).create_stream(options.device.index);
  const std::vector<char> needed = Impl::needed_nodes(graph, fetches, extra_targets);
  m.plan_fusion(graph, needed);
  for (const auto& node : graph.nodes())
    if (needed[static_cast<size_t>(node->id)]) m.add_node(*node, variables);
  m.fold_conversions();
  m.mark_deferrable();
  m.plan_memory();
  m.bind_kernels();
  if (m.contendable_plan()) {
    std::vector<TaskStep> tasks;
    for (const Impl::Step& s : m.steps)
      tasks.push_back({s.tasks, s.deferrable, s.deferred_readers, s.deferred_inputs});
    m.scheduler = std::make_unique<TaskScheduler>(
        std::move(tasks), m, m.group != nullptr ? &m.group->tasks : nullptr, options.group_member);
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
  if (m.stream != nullptr) device_ops(m.options.device.kind).make_current(m.options.device.index);
  if (on_fetch_ready)
    for (int f : m.source_fetches) on_fetch_ready(f);
  for (Impl::Step& s : m.steps) s.io.step = step;
  const bool contendable = m.scheduler != nullptr && !m.profiling;
  if (m.group != nullptr) return m.run_in_group(on_fetch_ready, contendable);
  const bool watch = contendable && m.options.contention == ProgramOptions::Contention::automatic;
  const int64_t waited = watch ? m.team_waited_ns() : 0;
  const auto start = std::chrono::steady_clock::now();
  if (contendable && m.contended) {
    m.on_fetch_ready = &on_fetch_ready;
    m.scheduler->run(m.options.num_threads);
    ++m.stats.contended_runs;
  } else {
    m.run_steps(on_fetch_ready);
  }
  m.synchronize();
  if (watch)
    observe_contention(m.team_waited_ns() - waited, m.ns_since(start), m.contended, m.streak);
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
