// A graph compiled for one device: the first half of a Program (program.h), which runs it. The
// stages, in order: the nodes needed for the fetches, fusion (fusion.h), a kernel per node with the
// layout conversions between kernels, the conversions producers can write themselves, the steps
// contended mode may defer, the memory plan (memory_plan.h), and every kernel bound to its
// buffers. Internal to the runtime.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tower/graph/graph.h"
#include "tower/kernels/kernel.h"
#include "tower/runtime/memory_plan.h"
#include "tower/runtime/program.h"
#include "tower/runtime/scheduler.h"
#include "tower/runtime/variable_store.h"

namespace tower {

struct CompiledProgram {
  // One buffer of a value: as its producer wrote it, or a copy converted into another layout.
  struct Buffer {
    Value value;
    Layout layout;
    bool external = false;  // a variable's, placeholder's or constant's own storage
    bool unused = false;    // its producer writes the converted copy instead (fold_conversions)
    int alias = -1;         // the buffer whose bytes it is (a Reshape's output, or in place)
    MemoryBlock block;      // in the arena, when not external
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
    std::vector<int> ready_fetches;  // fetch indices completed by this step
    TaskStep schedule;  // its tasks and deferral, as contended mode's scheduler takes them
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
  std::vector<MemoryBlock> scratch_blocks;  // per step
  ProgramStats stats;
  std::vector<char> absorbed;                  // node id -> run inside a fused kernel
  std::map<int, std::unique_ptr<Node>> fused;  // last node id of a chain -> its fused node
  // A fused node whose outputs are several nodes' (siblings): the value each output is.
  std::map<int, std::vector<Value>> fused_outputs;
  std::string placement;  // "node (op) -> device" per scheduled node
  bool taskable = false;  // contended mode may run: a CPU program whose kernels all have tasks
  int group_size = 0;     // the programs of its ProgramGroup; 0: alone

  // Compiles the nodes needed for `fetches` and `extra_targets` (options and fetches set first).
  void compile(const Graph& graph, VariableStore& variables,
               const std::vector<Value>& extra_targets);

  // Contended mode may run (mark_deferrable decides): the memory plan allows for it.
  bool contendable_plan() const { return taskable && (stats.deferrable > 0 || group_size > 0); }
  // The threads that may take this program's tasks (KernelContext::members).
  int members() const { return group_size > 0 ? group_size : options.num_threads; }
  static std::pair<int, int> key(const Value& v) { return {v.node->id, v.index}; }

 private:
  int add_buffer(const Value& v, Layout layout, int producer);
  int buffer_in(const Value& v, const Layout& layout);
  static std::vector<char> needed_nodes(const Graph& graph, const std::vector<Value>& fetches,
                                        const std::vector<Value>& extra_targets);
  void plan_fusion(const Graph& graph, const std::vector<char>& needed);
  Value output_value(const Node& node, int o) const;
  void add_node(const Node& node, VariableStore& variables);
  void add_kernel(const Node& node);
  void fold_conversions();
  void mark_deferrable();
  void plan_memory();
  void alias_reshapes();
  void alias_in_place(int window);
  void bind_kernels();
};

}  // namespace tower
