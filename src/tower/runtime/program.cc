#include "tower/runtime/program.h"

#include <algorithm>
#include <map>

#include "tower/core/allocator.h"
#include "tower/kernels/kernel.h"

namespace tower {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A block of the arena, alive over schedule positions [first, last].
struct Block {
  size_t bytes = 0;
  int first = 0, last = 0;
  size_t offset = 0;
};

// Greedy first-fit by liveness: blocks are placed in order of their first position at the lowest
// offset that does not overlap any block alive at the same time. Returns the arena size.
size_t plan_blocks(std::vector<Block*>& blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const Block* a, const Block* b) {
    return a->first != b->first ? a->first < b->first : a->bytes > b->bytes;
  });
  std::vector<Block*> placed;
  size_t arena = 0;
  for (Block* b : blocks) {
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping-in-time blocks
    for (Block* p : placed)
      if (p->first <= b->last && b->first <= p->last) busy.push_back({p->offset, p->offset + p->bytes});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto& [start, end] : busy) {
      if (offset + b->bytes <= start) break;
      offset = std::max(offset, end);
    }
    b->offset = offset;
    arena = std::max(arena, offset + b->bytes);
    placed.push_back(b);
  }
  return arena;
}
}  // namespace

struct Program::Impl {
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<Kernel> kernel;
    KernelIO io;
    std::vector<int> ready_fetches;  // fetch indices completed by this step
  };

  ProgramOptions options;
  void* stream = nullptr;  // a GPU's in-order queue for this program's kernels
  std::vector<Step> steps;
  std::map<std::pair<int, int>, Tensor> values;  // (node id, output) -> buffer view
  std::map<int, Tensor> owned;                   // placeholder/constant node id -> storage
  std::vector<Value> fetches;
  std::vector<int> source_fetches;               // fetches that are variables/placeholders
  Tensor arena;
  ProgramStats stats;
  std::string placement;

  ~Impl() {
    if (stream != nullptr) device_ops(options.device.kind).destroy_stream(stream);
  }
  // Waits for the device's work (a no-op on CPU, where kernels return when done).
  void synchronize() const {
    if (stream != nullptr) device_ops(options.device.kind).synchronize(stream);
  }

  const Tensor& value(const Value& v) const {
    auto it = values.find({v.node->id, v.index});
    TOWER_CHECK(it != values.end());
    return it->second;
  }
};

Program::Program(const Graph& graph, std::vector<Value> fetches, VariableStore& variables,
                 ProgramOptions options, std::vector<Value> extra_targets)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  m.fetches = fetches;

  // 1. The nodes needed, in id order (ids are topological: inputs exist before their users).
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

  // 2. Sources get their own storage; every other node gets a kernel.
  std::map<int, int> position;  // node id -> schedule position
  if (options.device.kind != DeviceKind::cpu) m.stream = device_ops(options.device.kind).create_stream(options.device.index);
  KernelContext context{options.device, options.num_threads, m.stream};
  for (const auto& node_ptr : graph.nodes()) {
    const Node& node = *node_ptr;
    if (!needed[static_cast<size_t>(node.id)]) continue;
    m.placement += fmt::format("{} ({}) -> {}\n", node.name, node.op, options.device.to_string());
    if (node.op == "Variable") {
      Tensor& t = variables.get(node.attr<VariableAttrs>().name);
      m.values.emplace(std::make_pair(node.id, 0), t.view());
    } else if (node.op == "Placeholder") {
      const TensorSpec& spec = node.outputs[0];
      auto& t = m.owned.emplace(node.id, Tensor(spec.shape, spec.dtype, options.device)).first->second;
      m.values.emplace(std::make_pair(node.id, 0), t.view());
    } else if (node.op == "Constant") {
      const auto& a = node.attr<ConstantAttrs>();
      Tensor host(a.spec.shape, a.spec.dtype);
      std::fill_n(host.data<float>(), host.numel(), a.value);
      auto& t = m.owned.emplace(node.id, Tensor(a.spec.shape, a.spec.dtype, options.device)).first->second;
      t.copy_from(host);
      m.values.emplace(std::make_pair(node.id, 0), t.view());
    } else {
      const KernelFactory* factory = find_kernel(node.op, options.device.kind);
      if (factory == nullptr)
        fail("{} ({}): no kernel for op {} on {}", node.name, node.op, node.op,
             options.device.to_string());
      Impl::Step step;
      step.node = &node;
      step.kernel = (*factory)(node, context);
      position[node.id] = static_cast<int>(m.steps.size());
      m.steps.push_back(std::move(step));
    }
  }

  // 3. Memory plan: one block per kernel output and per scratchpad, alive from its producer to
  // its last consumer (fetches to the end of the step).
  const int end = static_cast<int>(m.steps.size());
  std::map<std::pair<int, int>, Block> out_blocks;
  std::vector<Block> scratch_blocks(m.steps.size());
  for (int p = 0; p < end; ++p) {
    const Node& node = *m.steps[static_cast<size_t>(p)].node;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const TensorSpec& spec = node.outputs[o];
      size_t bytes = static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
      out_blocks[{node.id, static_cast<int>(o)}] = Block{align_up(std::max<size_t>(bytes, 1)), p, p};
    }
    for (const Value& in : node.inputs) {
      auto it = out_blocks.find({in.node->id, in.index});
      if (it != out_blocks.end()) it->second.last = std::max(it->second.last, p);
    }
    scratch_blocks[static_cast<size_t>(p)] =
        Block{align_up(m.steps[static_cast<size_t>(p)].kernel->scratch_bytes()), p, p};
  }
  for (const Value& f : fetches) {
    auto it = out_blocks.find({f.node->id, f.index});
    if (it != out_blocks.end()) it->second.last = end;
  }
  std::vector<Block*> blocks;
  for (auto& [key, b] : out_blocks) {
    blocks.push_back(&b);
    m.stats.unplanned_bytes += b.bytes;
  }
  for (auto& b : scratch_blocks)
    if (b.bytes > 0) blocks.push_back(&b);
  m.stats.arena_bytes = plan_blocks(blocks);
  m.arena = Tensor(Shape{static_cast<int64_t>(std::max<size_t>(m.stats.arena_bytes, 1))}, DType::u8,
                   options.device);
  auto* base = static_cast<char*>(m.arena.raw_data());
  for (auto& [key, b] : out_blocks) {
    const TensorSpec& spec =
        graph.nodes()[static_cast<size_t>(key.first)]->outputs[static_cast<size_t>(key.second)];
    m.values.emplace(key, Tensor::wrap(base + b.offset, spec.shape, spec.dtype, options.device));
  }

  // 4. Bind every kernel to its buffers, once.
  for (int p = 0; p < end; ++p) {
    Impl::Step& step = m.steps[static_cast<size_t>(p)];
    for (const Value& in : step.node->inputs) step.io.inputs.push_back(m.value(in).view());
    for (size_t o = 0; o < step.node->outputs.size(); ++o)
      step.io.outputs.push_back(m.value(Value{const_cast<Node*>(step.node), static_cast<int>(o)}).view());
    const Block& s = scratch_blocks[static_cast<size_t>(p)];
    step.io.scratch = s.bytes > 0 ? base + s.offset : nullptr;
    step.kernel->bind(step.io);
  }
  for (size_t i = 0; i < fetches.size(); ++i) {
    auto it = position.find(fetches[i].node->id);
    if (it == position.end())
      m.source_fetches.push_back(static_cast<int>(i));
    else
      m.steps[static_cast<size_t>(it->second)].ready_fetches.push_back(static_cast<int>(i));
  }
  m.stats.num_kernels = end;
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
  return impl_->value(impl_->fetches[static_cast<size_t>(fetch)]);
}

int Program::num_fetches() const { return static_cast<int>(impl_->fetches.size()); }

void Program::run(uint64_t step, const std::function<void(int)>& on_fetch_ready) {
  Impl& m = *impl_;
  set_kernel_threads(m.options.num_threads);
  if (on_fetch_ready)
    for (int f : m.source_fetches) on_fetch_ready(f);
  for (Impl::Step& s : m.steps) {
    s.io.step = step;
    s.kernel->run(s.io);
    if (on_fetch_ready && !s.ready_fetches.empty()) {
      m.synchronize();
      for (int f : s.ready_fetches) on_fetch_ready(f);
    }
  }
  m.synchronize();
}

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
