// A graph compiled for one device: the nodes needed for the fetches in a topological schedule,
// one kernel per node instantiated once, and a memory plan that reuses buffers by liveness inside
// one arena allocated at compile time. run() allocates nothing. Values between kernels may stay in
// device layouts (see kernels/kernel.h); inputs, fetches and variables are always plain.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tower/core/tensor.h"
#include "tower/graph/graph.h"
#include "tower/runtime/variable_store.h"

namespace tower {

class ProgramGroup;

struct ProgramOptions {
  Device device;
  int num_threads = 1;  // the device's compute team
  // Keep values in the layout their producer wrote (oneDNN's blocked formats) while consumers
  // accept it, converting only where needed. Off: every value is plain between kernels, as in a
  // kernel-by-kernel engine (for comparison; --plain_layouts).
  bool propagate_layouts = true;
  // Run chains that one library primitive computes with post-ops as one kernel: Conv2D or MatMul
  // -> BiasAdd [-> Relu] where each value of the chain is read only by the next node and not
  // fetched ("Conv2D+BiasAdd+Relu"), on devices that have such a kernel; siblings that one
  // primitive computes together (Conv2DBackpropFilter+BiasAddGrad); and conversions that the
  // producer can write itself (Kernel::write_output_as). Off (--no_fusion): one kernel per node,
  // for comparison.
  bool fuse = true;
  bool deterministic = true;              // KernelContext::deterministic
  Precision precision = Precision::fp32;  // KernelContext::precision
  // Contended mode, for a team of 2 or more threads on CPU. In team mode each kernel splits its
  // work over the team and the team waits at the kernel's end: when another process takes a core,
  // the thread that waits for it holds up every kernel. In contended mode the team's threads take
  // tasks (Kernel::tasks: chunks of batch rows, or whole kernels) from the kernel on the critical
  // path, and when none is left there, from the weight gradients, which nothing in the step reads
  // (deferred); a thread waits only when there is neither. A step starts only once every step
  // more than two before it (in program order) is done, so the memory plan keeps a buffer for
  // two steps after its last reader, not to the end of the step. automatic: contended while the
  // team's threads waited for a core (their scheduler statistics) for 15% of the step's time or
  // more in each of the last two steps, back to team mode after three steps under 5%
  // (--contention auto|on|off). Both modes give the same bits.
  enum class Contention { automatic, off, on };
  Contention contention = Contention::automatic;
  // One-thread CPU programs that run at the same time on threads of their own (a process's CPU
  // towers) share contended mode through a group (ProgramGroup); this program is its member
  // `group_member`. Null: the program alone.
  std::shared_ptr<ProgramGroup> group;
  int group_member = 0;
};

// One-thread CPU programs that run at the same time, each on a thread of its own and each once per
// round: a process's CPU towers. Each thread runs its own program in team mode; when another
// process takes a core, the scheduler gives the group's threads uneven shares, and the threads that
// finish first would wait for the others. In contended mode (ProgramOptions::contention, decided
// for the whole group from all its threads' waits) a thread instead takes tasks from its own
// program's critical step, then from the other programs' critical steps, then from the deferrable
// steps of any, and its run() returns when every program of the round is done. The kernels are
// built with tasks for all the group's threads (batch chunks of 16 rows, or more), in both modes,
// so the modes give the same bits. Every member must run once in every round, and a round may
// start only when every run() of the last one has returned (DataParallel::step joins its towers).
class ProgramGroup {
 public:
  explicit ProgramGroup(int size);
  ~ProgramGroup();
  ProgramGroup(const ProgramGroup&) = delete;
  ProgramGroup& operator=(const ProgramGroup&) = delete;

 private:
  friend class Program;
  struct State;
  std::unique_ptr<State> state_;
};

// One scheduled kernel's time while profiling (Program::set_profiling), summed over runs.
struct KernelTime {
  std::string node, op;  // op "Reorder" for a layout conversion of the node's value
  double seconds = 0;
  int64_t runs = 0;
};

struct ProgramStats {
  int num_kernels = 0;         // one per scheduled node
  int reorders = 0;            // layout conversions run per step
  int fused_nodes = 0;         // nodes run inside another node's kernel (ProgramOptions::fuse)
  int folded_conversions = 0;  // conversions written directly by the producer (fuse too)
  int in_place = 0;            // outputs written over the input they add to (no copy)
  size_t arena_bytes = 0;      // planned (with reuse)
  size_t unplanned_bytes = 0;  // what one buffer per value would take
  int deferrable = 0;          // kernels off the critical path (0: never contended mode)
  int64_t contended_runs = 0;  // runs made in contended mode
};

class Program {
 public:
  // Compiles the nodes needed to compute `fetches` (plus `extra_targets`, nodes run for their
  // side effects such as moving-average updates). Variables are bound to `variables`.
  Program(const Graph& graph, std::vector<Value> fetches, VariableStore& variables,
          ProgramOptions options, std::vector<Value> extra_targets = {});
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // The buffer of a placeholder: fill it before run(). Throws if the placeholder is not used.
  Tensor& input(Value placeholder);
  bool has_input(Value placeholder) const;
  // The value of fetches[i] after run(); valid until the next run().
  const Tensor& output(int fetch) const;
  int num_fetches() const;

  // Runs the schedule on the calling thread (and its team). `on_fetch_ready(i)` is called as soon
  // as the kernel that computes fetches[i] has run (gradient reducers start reducing while the
  // backward pass goes on); in contended mode by the team thread that finished that kernel, so two
  // calls may come at once. On a GPU the kernels are queued on the program's own stream(): the
  // value is there for work queued behind it, and for the host after synchronize(). run() returns
  // when the stream is done.
  void run(uint64_t step = 0, const std::function<void(int fetch)>& on_fetch_ready = {});
  // Waits for the kernels queued so far (a no-op on CPU, where kernels return when done).
  void synchronize() const;
  // The GPU stream of this program's kernels; null on CPU.
  void* stream() const;

  // Times every kernel of the following runs (and clears the times so far). On a GPU each kernel
  // is then waited for, which slows the program down; on CPU the cost is two clock reads.
  void set_profiling(bool on);
  std::vector<KernelTime> profile() const;  // in schedule order

  const ProgramStats& stats() const;
  // Prints "node -> device" for every scheduled node (--log_device_placement).
  std::string placement_log() const;

 private:
  friend class ProgramGroup;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience for tests and tools: compile, feed by placeholder, run once, copy the fetches out.
std::vector<Tensor> run_once(const Graph& graph, const std::vector<Value>& fetches,
                             VariableStore& variables,
                             const std::vector<std::pair<Value, const Tensor*>>& feeds,
                             int num_threads = 1);

}  // namespace tower
