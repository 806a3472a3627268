#include <algorithm>

#include "tower/runtime/compiled_program.h"
#include "tower/runtime/fusion.h"
#include "tower/runtime/scheduler.h"

namespace tower {

void CompiledProgram::compile(const Graph& graph, VariableStore& variables,
                              const std::vector<Value>& extra_targets) {
  const std::vector<char> needed = needed_nodes(graph, fetches, extra_targets);
  plan_fusion(graph, needed);
  for (const auto& node : graph.nodes())
    if (needed[static_cast<size_t>(node->id)]) add_node(*node, variables);
  fold_conversions();
  mark_deferrable();
  plan_memory();
  bind_kernels();
}

int CompiledProgram::add_buffer(const Value& v, Layout layout, int producer) {
  Buffer b{v, std::move(layout)};
  b.block.first = b.block.last = producer;
  buffers.push_back(std::move(b));
  versions[key(v)].push_back(static_cast<int>(buffers.size()) - 1);
  return static_cast<int>(buffers.size()) - 1;
}

// The buffer of `v` in `layout`: an existing version, or a new one filled by a reorder step
// scheduled now (before the step that asked).
int CompiledProgram::buffer_in(const Value& v, const Layout& layout) {
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

// 1. The nodes needed for the fetches and targets (ids are topological: inputs come first).
std::vector<char> CompiledProgram::needed_nodes(const Graph& graph,
                                                const std::vector<Value>& fetches,
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
void CompiledProgram::plan_fusion(const Graph& graph, const std::vector<char>& needed) {
  absorbed.assign(graph.nodes().size(), 0);
  if (!options.fuse) return;
  FusionPlan plan = tower::plan_fusion(graph, needed, fetches, options.device.kind);
  absorbed = std::move(plan.absorbed);
  fused = std::move(plan.fused);
  fused_outputs = std::move(plan.fused_outputs);
  stats.fused_nodes += plan.fused_nodes;
}

// The value that output o of a kernel's node is (a sibling fusion's outputs are other nodes').
Value CompiledProgram::output_value(const Node& node, int o) const {
  auto it = fused_outputs.find(node.id);
  if (it != fused_outputs.end()) return it->second[static_cast<size_t>(o)];
  return node.output(o);
}

// 2. A source gets its own storage; every other node gets a kernel, built knowing the layouts
// its inputs come in, preceded by the reorders into the layouts it reads. Fetched values get a
// plain buffer right after their producer, so that reducers may start on them at once.
void CompiledProgram::add_node(const Node& node, VariableStore& variables) {
  placement += fmt::format("{} ({}) -> {}\n", node.name, node.op, options.device.to_string());
  Tensor source;
  if (node.op == "Variable") {
    source = variables.get(node.attr<VariableAttrs>().name).view();
  } else if (node.op == "Placeholder") {
    const TensorSpec& spec = node.outputs[0];
    source =
        owned.emplace(node.id, Tensor(spec.shape, spec.dtype, options.device)).first->second.view();
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
  int b = add_buffer(node.output(0), Layout{}, -1);
  buffers[static_cast<size_t>(b)].external = true;
  buffers[static_cast<size_t>(b)].view = std::move(source);
}

void CompiledProgram::add_kernel(const Node& node) {
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
void CompiledProgram::fold_conversions() {
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
    if (p < 0 || steps[static_cast<size_t>(p)].reorder || readers[static_cast<size_t>(from)] != 1 ||
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
      MemoryBlock& block = buffers[static_cast<size_t>(b)].block;
      block.first = block.last = static_cast<int>(p);
    }
}

// 2c. The steps that contended mode may defer (ProgramOptions::contention), on a CPU team of 2
// or more: those whose outputs are fetched or read, and read only by deferrable steps (the
// weight gradients, their conversions and weight decay terms).
void CompiledProgram::mark_deferrable() {
  if (options.device.kind != DeviceKind::cpu || members() < 2 ||
      options.contention == ProgramOptions::Contention::off)
    return;
  for (Step& step : steps) {
    const Tasks tasks = step.kernel->tasks();
    if (tasks.kind == Tasks::Kind::team) return;
    step.schedule.tasks = tasks.count;
  }
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
    step.schedule.deferrable =
        !step.outputs.empty() && std::all_of(step.outputs.begin(), step.outputs.end(), [&](int b) {
          const auto& r = readers[static_cast<size_t>(b)];
          return (fetched[static_cast<size_t>(b)] || !r.empty()) &&
                 std::all_of(r.begin(), r.end(), [&](int q) {
                   return steps[static_cast<size_t>(q)].schedule.deferrable;
                 });
        });
  }
  for (size_t p = 0; p < steps.size(); ++p) {
    Step& step = steps[p];
    if (!step.schedule.deferrable) continue;
    ++stats.deferrable;
    for (int b : step.inputs)
      if (const int q = producer[static_cast<size_t>(b)];
          q >= 0 && steps[static_cast<size_t>(q)].schedule.deferrable) {
        steps[static_cast<size_t>(q)].schedule.deferred_readers.push_back(static_cast<int>(p));
        ++step.schedule.deferred_inputs;
      }
  }
}

// 3. Memory plan: one block per buffer and per scratchpad, alive from its producer to its last
// reader (plus kWindow - 1 steps where contended mode may run; fetches to the end of the step),
// placed in one arena.
void CompiledProgram::plan_memory() {
  const int end = static_cast<int>(steps.size());
  const int window = contendable_plan() ? TaskScheduler::kWindow : 1;
  scratch_blocks.assign(steps.size(), MemoryBlock{});
  for (int p = 0; p < end; ++p) {
    const Step& step = steps[static_cast<size_t>(p)];
    // In contended mode a step may run beside the kWindow - 1 steps after it (in_window).
    const int last = std::min(p + window - 1, end);
    for (int b : step.inputs) {
      MemoryBlock& block = buffers[static_cast<size_t>(b)].block;
      block.last = std::max(block.last, last);
    }
    scratch_blocks[static_cast<size_t>(p)] =
        MemoryBlock{align_up(step.kernel->scratch_bytes()), p, last};
  }
  for (const Value& f : fetches) {
    int b = buffer_in(f, Layout{});  // exists: sources are plain, add_kernel made the others
    fetch_buffers.push_back(b);
    buffers[static_cast<size_t>(b)].block.last = end;
  }
  TOWER_CHECK(static_cast<int>(steps.size()) == end);
  alias_in_place(window);
  alias_reshapes();
  std::vector<MemoryBlock*> blocks;
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
void CompiledProgram::alias_reshapes() {
  for (const Step& step : steps) {
    if (step.reorder || step.node->op != "Reshape") continue;
    Buffer& out = buffers[static_cast<size_t>(step.outputs[0])];
    const Buffer& in = buffers[static_cast<size_t>(step.inputs[0])];
    if (in.external || in.unused || out.unused || !in.layout.is_plain() || !out.layout.is_plain() ||
        in.value.dtype() != out.value.dtype())
      continue;
    out.alias = in.alias >= 0 ? in.alias : step.inputs[0];
    MemoryBlock& root = buffers[static_cast<size_t>(out.alias)].block;
    root.last = std::max(root.last, out.block.last);
  }
}

// A kernel's output takes the buffer of the input it names (output_in_place_of) when that input
// is the output's twin (same layout, in the arena, not fetched) and read by nothing else that may
// run at once or after. Run before alias_reshapes, which then follows it.
void CompiledProgram::alias_in_place(int window) {
  for (int p = 0; p < static_cast<int>(steps.size()); ++p) {
    const Step& step = steps[static_cast<size_t>(p)];
    const int k = step.reorder ? -1 : step.kernel->output_in_place_of();
    if (k < 0) continue;
    const int from = step.inputs[static_cast<size_t>(k)];
    // The input may itself be written in place of another buffer (a residual network's chain of
    // sums): its root holds the memory, and no other name of that memory may be read elsewhere.
    const auto root_of = [&](int b) {
      const int a = buffers[static_cast<size_t>(b)].alias;
      return a >= 0 ? a : b;
    };
    const int root = root_of(from);
    Buffer& in = buffers[static_cast<size_t>(from)];
    Buffer& out = buffers[static_cast<size_t>(step.outputs[0])];
    if (in.external || in.unused || out.external || out.unused || !(in.layout == out.layout) ||
        in.value.spec() != out.value.spec() ||
        std::any_of(fetch_buffers.begin(), fetch_buffers.end(),
                    [&](int f) { return root_of(f) == root; }))
      continue;
    // Read as another input of this step, later, or by a step that contended mode may run beside
    // this one: keep it.
    bool read_elsewhere = false;
    for (int q = std::max(p - window + 1, 0); q < static_cast<int>(steps.size()); ++q) {
      const std::vector<int>& inputs = steps[static_cast<size_t>(q)].inputs;
      for (size_t i = 0; i < inputs.size(); ++i)
        read_elsewhere |= root_of(inputs[i]) == root && (q != p || static_cast<int>(i) != k);
    }
    if (read_elsewhere) continue;
    out.alias = root;
    MemoryBlock& block = buffers[static_cast<size_t>(root)].block;
    block.last = std::max(block.last, out.block.last);
    ++stats.in_place;
  }
}

// 4. Every kernel bound to its buffers, once; each fetch marked ready after its producer.
void CompiledProgram::bind_kernels() {
  auto* base = static_cast<char*>(arena.raw_data());
  for (size_t p = 0; p < steps.size(); ++p) {
    Step& step = steps[p];
    for (int b : step.inputs) step.io.inputs.push_back(buffers[static_cast<size_t>(b)].view.view());
    for (int b : step.outputs)
      step.io.outputs.push_back(buffers[static_cast<size_t>(b)].view.view());
    const MemoryBlock& s = scratch_blocks[p];
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

}  // namespace tower
