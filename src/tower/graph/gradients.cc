#include "tower/graph/gradients.h"

#include <algorithm>
#include <map>

#include "tower/graph/op_registry.h"

namespace tower {

Value add_n(const Scope& scope, const std::vector<Value>& values) {
  TOWER_CHECK(!values.empty());
  if (values.size() == 1) return values[0];
  return scope.op("AddN", values);
}

std::vector<Value> gradients(const Scope& scope, Value loss, const std::vector<Value>& xs) {
  if (loss.shape().rank() != 0)
    fail("gradients(): the loss '{}' must be a scalar, got shape {}", loss.name(),
         loss.shape().to_string());
  return gradients(scope, {loss}, xs, {scope.constant("grad_ys", Shape{}, 1.0f)});
}

std::vector<Value> gradients(const Scope& scope, const std::vector<Value>& ys,
                             const std::vector<Value>& xs, const std::vector<Value>& grad_ys) {
  TOWER_CHECK(ys.size() == grad_ys.size() && !ys.empty());
  const Graph& graph = scope.graph();
  int last = 0;
  for (const Value& y : ys) last = std::max(last, y.node->id);

  // Nodes from which some x can be reached going forward (the only ones worth differentiating).
  std::vector<char> leads_to_x(static_cast<size_t>(last) + 1, 0);
  for (const Value& x : xs)
    if (x.node->id <= last) leads_to_x[static_cast<size_t>(x.node->id)] = 1;
  for (int id = 0; id <= last; ++id) {
    const Node& n = *graph.nodes()[static_cast<size_t>(id)];
    for (const Value& in : n.inputs)
      if (leads_to_x[static_cast<size_t>(in.node->id)]) leads_to_x[static_cast<size_t>(id)] = 1;
  }

  // Pending gradients per (node, output), summed when the node is reached (ids are topological).
  std::map<std::pair<int, int>, std::vector<Value>> pending;
  for (size_t i = 0; i < ys.size(); ++i) {
    if (grad_ys[i].shape() != ys[i].shape())
      fail("gradients(): grad_ys[{}] has shape {}, but '{}' has shape {}", i,
           grad_ys[i].shape().to_string(), ys[i].name(), ys[i].shape().to_string());
    pending[{ys[i].node->id, ys[i].index}].push_back(grad_ys[i]);
  }

  std::map<std::pair<int, int>, Value> result;
  for (int id = last; id >= 0; --id) {
    if (!leads_to_x[static_cast<size_t>(id)]) continue;
    Node& node = *graph.nodes()[static_cast<size_t>(id)];
    std::vector<Value> output_grads(node.outputs.size());
    bool any = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      auto it = pending.find({id, static_cast<int>(o)});
      if (it == pending.end()) continue;
      output_grads[o] = add_n(scope, it->second);
      result[{id, static_cast<int>(o)}] = output_grads[o];
      any = true;
    }
    if (!any) continue;
    const OpDef& def = get_op(node.op);
    if (!def.grad) continue;  // gradients stop at non-differentiable ops
    std::vector<Value> input_grads = def.grad(scope, node, output_grads);
    TOWER_CHECK_MSG(input_grads.size() == node.inputs.size(),
                    "gradient of {} returned {} values for {} inputs", node.op, input_grads.size(),
                    node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value& in = node.inputs[i];
      if (!input_grads[i].defined() || !leads_to_x[static_cast<size_t>(in.node->id)]) continue;
      TOWER_CHECK_MSG(input_grads[i].shape() == in.shape(),
                      "gradient of {} input {} has shape {}, expected {}", node.op, i,
                      input_grads[i].shape().to_string(), in.shape().to_string());
      pending[{in.node->id, in.index}].push_back(input_grads[i]);
    }
  }

  std::vector<Value> grads;
  for (const Value& x : xs) {
    auto it = result.find({x.node->id, x.index});
    grads.push_back(it == result.end() ? Value{} : it->second);
  }
  return grads;
}

}  // namespace tower
