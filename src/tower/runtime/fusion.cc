#include "tower/runtime/fusion.h"

#include <algorithm>
#include <any>
#include <string_view>

#include "tower/kernels/kernel.h"
#include "tower/ops/batch_norm.h"

namespace tower {
namespace {

Value out(const Node* n) { return n->output(0); }

// One row per chain: its first op (any of), the op that alone reads the first's output, the ops
// that may follow (each alone reading the one before; all of them or none, unless `whole_tail`:
// then the rule matches only with all of them), what else the first two must satisfy, and the
// fused node's attributes (null: the first's). The first row that matches is taken.
struct ChainRule {
  std::vector<std::string_view> first;
  std::string_view then;
  std::vector<std::string_view> tail;
  bool (*fits)(const Node& first, const Node& then);
  std::any (*attrs)(const Node& first, const Node& then) = nullptr;
  bool whole_tail = false;
  // The fused node also has the first node's other outputs, and is built where the first is (its
  // readers may come before the chain's last node; the other nodes may have no other inputs).
  bool keeps_first_outputs = false;
};

bool has_input(const Node& first, const Node&) { return first.inputs[0].shape().numel() > 0; }
// An inference batch norm folded into the convolution before it (the kernel scales the weights
// and makes the bias each run): not the same bits as the kernels apart.
bool folds(const Node& conv, const Node& batch_norm) {
  return has_input(conv, batch_norm) &&
         batch_norm.attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::inference;
}
// Every input of the first node has its output's shape (element by element, no broadcast).
bool same_shapes(const Node& first, const Node&) {
  for (const Value& in : first.inputs)
    if (in.shape() != first.outputs[0].shape) return false;
  return true;
}
std::any conv_batch_norm_attrs(const Node& conv, const Node& batch_norm) {
  return ops::ConvBatchNormAttrs{conv.attr<ops::Conv2DAttrs>(),
                                 batch_norm.attr<ops::BatchNormAttrs>()};
}

const ChainRule kChains[] = {
    {{"Conv2D", "MatMul"}, "BiasAdd", {"Relu"}, has_input},
    // A residual block's end: the shortcut added (as the convolution's sum post-op), then ReLU.
    {{"Conv2D"}, "FusedBatchNorm", {"Add", "Relu"}, folds, conv_batch_norm_attrs, true},
    {{"Conv2D"}, "FusedBatchNorm", {"Relu6"}, folds, conv_batch_norm_attrs, true},
    {{"Conv2D"}, "FusedBatchNorm", {"Relu"}, folds, conv_batch_norm_attrs},
    // A batch norm's ReLU in the same pass (oneDNN's fused ReLU flag); its statistics go on to
    // the moving averages and the gradient.
    {{"FusedBatchNorm"},
     "Relu",
     {},
     [](const Node&, const Node&) { return true; },
     nullptr,
     false,
     true},
    // A residual block's end in training: the shortcut added and the ReLU in the batch norm's
    // normalizing pass (no gradient reads the batch norm's own output, so it is not written).
    // Built where the batch norm is: the Add's other operand must come before it.
    {{"FusedBatchNorm"},
     "Add",
     {"Relu"},
     [](const Node& first, const Node& add) {
       const Value& other = add.inputs[0] == out(&first) ? add.inputs[1] : add.inputs[0];
       return first.attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::training &&
              same_shapes(add, add) && other.node->id < first.id;
     },
     nullptr,
     true,
     true},
    // ReLU's gradient masking dy for a batch norm's gradient alone, in its passes.
    {{"ReluGrad"},
     "FusedBatchNormGrad",
     {},
     [](const Node& first, const Node& then) { return then.inputs[0] == out(&first); },
     [](const Node&, const Node& then) { return then.attrs; }},
    {{"MaxPoolGrad", "LRNGrad"},
     "ReluGrad",
     {},
     [](const Node& first, const Node& then) { return then.inputs[1] == first.inputs[0]; }},
    // A residual sum and the ReLU after it.
    {{"Add"}, "Relu", {}, same_shapes},
    // The gradients of a ReLU's output summed (a residual block's two branches), then masked by
    // the ReLU's gradient.
    {{"AddN"},
     "ReluGrad",
     {},
     [](const Node& first, const Node& then) {
       return same_shapes(first, then) && then.inputs[0] == out(&first) &&
              then.inputs[1].shape() == then.inputs[0].shape();
     }},
    {{"Mul"},  // a weight decay term (a scalar times the weight) added to its gradient
     "AddN",
     {},
     [](const Node& first, const Node& then) {
       return first.inputs[1].shape().numel() == 1 &&
              first.inputs[0].shape() == first.outputs[0].shape && then.inputs.size() == 2;
     }},
};

// Who reads each value of the needed nodes.
class Readers {
 public:
  Readers(const Graph& graph, const std::vector<char>& needed, const std::vector<Value>& fetches)
      : fetches_(fetches) {
    for (const auto& node : graph.nodes())
      if (needed[static_cast<size_t>(node->id)])
        for (const Value& in : node->inputs) of_[key(in)].push_back(node.get());
  }
  const std::vector<const Node*>& of(const Value& v) const {
    static const std::vector<const Node*> none;
    auto it = of_.find(key(v));
    return it == of_.end() ? none : it->second;
  }
  bool fetched(const Value& v) const {
    return std::find(fetches_.begin(), fetches_.end(), v) != fetches_.end();
  }
  // The next node of a chain: the only reader of v, when v is not fetched.
  const Node* next(const Value& v) const {
    const auto& r = of(v);
    return r.size() == 1 && !fetched(v) ? r[0] : nullptr;
  }

 private:
  static std::pair<int, int> key(const Value& v) { return {v.node->id, v.index}; }
  const std::vector<Value>& fetches_;
  std::map<std::pair<int, int>, std::vector<const Node*>> of_;
};

// A node already in a chain (two residual branches may end at the same Add): in no other.
bool taken(const FusionPlan& plan, const Node* n) {
  return plan.absorbed[static_cast<size_t>(n->id)] || plan.fused.count(n->id) > 0;
}

// The chain of a rule that starts at `first`, and the rule; empty when none does.
std::pair<std::vector<const Node*>, const ChainRule*> chain_from(const Node& first,
                                                                 const Readers& readers,
                                                                 const FusionPlan& plan) {
  for (const ChainRule& rule : kChains) {
    if (std::find(rule.first.begin(), rule.first.end(), first.op) == rule.first.end()) continue;
    const Node* then = readers.next(out(&first));
    if (then == nullptr || then->op != rule.then || taken(plan, then) || !rule.fits(first, *then))
      continue;
    std::vector<const Node*> chain = {&first, then};
    for (std::string_view op : rule.tail) {
      const Node* next = readers.next(out(chain.back()));
      // (An Add of two different values of one shape: the other operand is the output's
      // previous contents.)
      if (next == nullptr || next->op != op || taken(plan, next) ||
          (op == "Add" && (next->inputs[0].shape() != next->inputs[1].shape() ||
                           next->inputs[0] == next->inputs[1])))
        break;
      chain.push_back(next);
    }
    if (chain.size() != 2 + rule.tail.size()) {
      if (rule.whole_tail) continue;
      chain.resize(2);
    }
    // A node run inside the kernel has no other output anyone reads (the batch norm's
    // statistics, for one).
    for (size_t i = rule.keeps_first_outputs ? 1 : 0; i + 1 < chain.size(); ++i)
      for (int o = 1; o < static_cast<int>(chain[i]->outputs.size()); ++o)
        if (!readers.of(chain[i]->output(o)).empty() || readers.fetched(chain[i]->output(o)))
          return {};
    return {chain, &rule};
  }
  return {};
}

void fuse_chains(const Graph& graph, const std::vector<char>& needed, const Readers& readers,
                 DeviceKind device, FusionPlan& plan) {
  for (const auto& node : graph.nodes()) {
    const Node& first = *node;
    if (!needed[static_cast<size_t>(first.id)] || first.outputs.empty() ||
        first.outputs[0].shape.numel() == 0)
      continue;
    if (taken(plan, &first)) continue;
    const auto [chain, rule] = chain_from(first, readers, plan);
    if (chain.empty()) continue;
    auto fused = std::make_unique<Node>(*chain.back());
    fused->op = first.op;
    fused->inputs = first.inputs;
    for (size_t i = 1; i < chain.size(); ++i) {
      fused->op += "+" + chain[i]->op;
      for (const Value& in : chain[i]->inputs)  // all but the value from the chain
        if (in != out(chain[i - 1])) fused->inputs.push_back(in);
    }
    fused->attrs = rule->attrs != nullptr ? rule->attrs(first, *chain[1]) : first.attrs;
    if (find_kernel(fused->op, device) == nullptr) continue;
    if (rule->keeps_first_outputs) {
      std::vector<Value> outputs = {out(chain.back())};
      for (int o = 1; o < static_cast<int>(first.outputs.size()); ++o) {
        fused->outputs.push_back(first.outputs[static_cast<size_t>(o)]);
        outputs.push_back(first.output(o));
      }
      fused->id = first.id;
      plan.fused_outputs[first.id] = std::move(outputs);
      for (size_t i = 1; i < chain.size(); ++i)
        plan.absorbed[static_cast<size_t>(chain[i]->id)] = 1;
    } else {
      for (size_t i = 0; i + 1 < chain.size(); ++i)
        plan.absorbed[static_cast<size_t>(chain[i]->id)] = 1;
    }
    plan.fused_nodes += static_cast<int>(chain.size()) - 1;
    plan.fused[fused->id] = std::move(fused);
  }
}

void fuse_siblings(const Graph& graph, const std::vector<char>& needed, const Readers& readers,
                   DeviceKind device, FusionPlan& plan) {
  for (const auto& node : graph.nodes()) {
    const Node& bias = *node;
    if (!needed[static_cast<size_t>(bias.id)] || bias.op != "BiasAddGrad" ||
        bias.inputs[0].shape().rank() != 4 || plan.absorbed[static_cast<size_t>(bias.id)])
      continue;
    const Value dy = bias.inputs[0];
    const Node* filter = nullptr;
    for (const Node* r : readers.of(dy))
      if (r->op == "Conv2DBackpropFilter" && r->inputs[1] == dy && !plan.fused.count(r->id) &&
          !plan.absorbed[static_cast<size_t>(r->id)] && r->inputs[0].shape().numel() > 0)
        filter = r;
    if (filter == nullptr || plan.fused.count(bias.id)) continue;
    const Node& later = filter->id > bias.id ? *filter : bias;
    auto fused = std::make_unique<Node>(later);
    fused->op = "Conv2DBackpropFilter+BiasAddGrad";
    fused->inputs = filter->inputs;
    fused->attrs = filter->attrs;
    fused->outputs = {filter->outputs[0], bias.outputs[0]};
    if (find_kernel(fused->op, device) == nullptr) continue;
    plan.absorbed[static_cast<size_t>(later.id == bias.id ? filter->id : bias.id)] = 1;
    ++plan.fused_nodes;
    plan.fused_outputs[later.id] = {out(filter), out(&bias)};
    plan.fused[later.id] = std::move(fused);
  }
}

}  // namespace

FusionPlan plan_fusion(const Graph& graph, const std::vector<char>& needed,
                       const std::vector<Value>& fetches, DeviceKind device) {
  FusionPlan plan;
  plan.absorbed.assign(graph.nodes().size(), 0);
  const Readers readers(graph, needed, fetches);
  fuse_chains(graph, needed, readers, device, plan);
  fuse_siblings(graph, needed, readers, device, plan);
  return plan;
}

}  // namespace tower
