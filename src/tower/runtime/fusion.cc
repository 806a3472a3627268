#include "tower/runtime/fusion.h"

#include <algorithm>
#include <string_view>

#include "tower/kernels/kernel.h"

namespace tower {
namespace {

Value out(const Node* n) { return n->output(0); }

// One row per chain: its first op (any of), the op that alone reads the first's output, an op
// that may follow that one, and what else the two must satisfy.
struct ChainRule {
  std::vector<std::string_view> first;
  std::string_view then, optional_last;
  bool (*fits)(const Node& first, const Node& then);
};

const ChainRule kChains[] = {
    {{"Conv2D", "MatMul"},
     "BiasAdd",
     "Relu",
     [](const Node& first, const Node&) { return first.inputs[0].shape().numel() > 0; }},
    {{"MaxPoolGrad", "LRNGrad"},
     "ReluGrad",
     "",
     [](const Node& first, const Node& then) { return then.inputs[1] == first.inputs[0]; }},
    {{"Mul"},  // a weight decay term (a scalar times the weight) added to its gradient
     "AddN",
     "",
     [](const Node& first, const Node& then) {
       return first.inputs[1].shape().numel() == 1 &&
              first.inputs[0].shape() == first.outputs[0].shape && then.inputs.size() == 2;
     }},
};

}  // namespace

FusionPlan plan_fusion(const Graph& graph, const std::vector<char>& needed,
                       const std::vector<Value>& fetches, DeviceKind device) {
  FusionPlan plan;
  plan.absorbed.assign(graph.nodes().size(), 0);
  auto key = [](const Value& v) { return std::pair<int, int>{v.node->id, v.index}; };
  std::map<std::pair<int, int>, std::vector<const Node*>> readers;
  for (const auto& node : graph.nodes())
    if (needed[static_cast<size_t>(node->id)])
      for (const Value& in : node->inputs) readers[key(in)].push_back(node.get());
  // The next node of a chain: the only reader of v, when v is not fetched.
  auto next = [&](const Value& v) -> const Node* {
    const auto& r = readers[key(v)];
    const bool fetched =
        std::any_of(fetches.begin(), fetches.end(), [&](const Value& f) { return f == v; });
    return r.size() == 1 && !fetched ? r[0] : nullptr;
  };

  for (const auto& node : graph.nodes()) {
    const Node& first = *node;
    if (!needed[static_cast<size_t>(first.id)] || first.outputs.empty() ||
        first.outputs[0].shape.numel() == 0)
      continue;
    std::vector<const Node*> chain;
    for (const ChainRule& rule : kChains) {
      if (std::find(rule.first.begin(), rule.first.end(), first.op) == rule.first.end()) continue;
      const Node* then = next(out(&first));
      if (then == nullptr || then->op != rule.then || !rule.fits(first, *then)) break;
      chain = {&first, then};
      const Node* last = rule.optional_last.empty() ? nullptr : next(out(then));
      if (last != nullptr && last->op == rule.optional_last) chain.push_back(last);
      break;
    }
    if (chain.empty()) continue;
    auto fused = std::make_unique<Node>(*chain.back());
    fused->op = first.op;
    fused->inputs = first.inputs;
    for (size_t i = 1; i < chain.size(); ++i) {
      fused->op += "+" + chain[i]->op;
      for (const Value& in : chain[i]->inputs)  // all but the value from the chain
        if (in != out(chain[i - 1])) fused->inputs.push_back(in);
    }
    fused->attrs = first.attrs;
    if (find_kernel(fused->op, device) == nullptr) continue;
    for (size_t i = 0; i + 1 < chain.size(); ++i)
      plan.absorbed[static_cast<size_t>(chain[i]->id)] = 1;
    plan.fused_nodes += static_cast<int>(chain.size()) - 1;
    plan.fused[fused->id] = std::move(fused);
  }

  for (const auto& node : graph.nodes()) {
    const Node& bias = *node;
    if (!needed[static_cast<size_t>(bias.id)] || bias.op != "BiasAddGrad" ||
        bias.inputs[0].shape().rank() != 4 || plan.absorbed[static_cast<size_t>(bias.id)])
      continue;
    const Value dy = bias.inputs[0];
    const Node* filter = nullptr;
    for (const Node* r : readers[key(dy)])
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
  return plan;
}

}  // namespace tower
