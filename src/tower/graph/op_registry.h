// Ops register themselves (one static OpRegistrar per op, in src/tower/ops/<family>.cc):
// no central enum or switch. The graph asks the registry to infer output specs; autodiff asks it
// for the gradient rule.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tower/graph/graph.h"

namespace tower {

// Computes a node's output specs from its inputs and attributes; throws tower::Error (naming the
// node and the offending inputs) when the model is wrong.
using InferFn = std::function<std::vector<TensorSpec>(const Node& node)>;

// Given the forward node and the gradient flowing into each of its outputs (undefined Value when
// an output does not reach the loss), adds nodes computing the gradient of each input and returns
// them (undefined Value for inputs that get no gradient, e.g. integer labels).
using GradFn = std::function<std::vector<Value>(const Scope& scope, const Node& node,
                                                const std::vector<Value>& output_grads)>;

struct OpDef {
  std::string name;
  InferFn infer;
  GradFn grad;  // empty: not differentiable (gradients stop here)
};

const OpDef* find_op(const std::string& name);  // nullptr if not registered
const OpDef& get_op(const std::string& name);   // throws tower::Error if not registered
std::vector<std::string> registered_ops();      // sorted

struct OpRegistrar {
  explicit OpRegistrar(OpDef def);
};

// Helpers for infer functions: they throw tower::Error naming the node.
void expect_num_inputs(const Node& node, size_t count);
void expect_rank(const Node& node, int input, int rank);
void expect_dtype(const Node& node, int input, DType dtype);
[[noreturn]] void fail_node(const Node& node, const std::string& what);

}  // namespace tower
