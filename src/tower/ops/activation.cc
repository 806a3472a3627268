#include "tower/ops/activation.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;
using GradOf = Value (*)(const Scope&, Value, Value);

std::vector<TensorSpec> infer_activation(const Node& n) {
  expect_num_inputs(n, 1);
  expect_dtype(n, 0, DType::f32);
  return {{n.inputs[0].shape()}};
}

// Inputs (dy, y).
std::vector<TensorSpec> infer_activation_grad(const Node& n) {
  expect_num_inputs(n, 2);
  expect_dtype(n, 0, DType::f32);
  expect_dtype(n, 1, DType::f32);
  if (n.inputs[0].shape() != n.inputs[1].shape())
    fail_node(n, fmt::format("the output gradient {} and the output {} must have one shape",
                             n.inputs[0].shape().to_string(), n.inputs[1].shape().to_string()));
  return {{n.inputs[0].shape()}};
}

// The gradient rule of every activation here: the matching *Grad op of (dy, y).
template <GradOf grad_of>
Grads from_output(const Scope& s, const Node& n, const Grads& g) {
  return Grads{grad_of(s, g[0], n.output(0))};
}

OpRegistrar relu_op{{"Relu", infer_activation, from_output<relu_grad>}};
OpRegistrar relu_grad_op{{"ReluGrad", infer_activation_grad}};
OpRegistrar relu6_op{{"Relu6", infer_activation, from_output<relu6_grad>}};
OpRegistrar relu6_grad_op{{"Relu6Grad", infer_activation_grad}};
OpRegistrar elu_op{{"Elu", infer_activation, from_output<elu_grad>}};
OpRegistrar elu_grad_op{{"EluGrad", infer_activation_grad}};
OpRegistrar sigmoid_op{{"Sigmoid", infer_activation, from_output<sigmoid_grad>}};
OpRegistrar sigmoid_grad_op{{"SigmoidGrad", infer_activation_grad}};
OpRegistrar tanh_op{{"Tanh", infer_activation, from_output<tanh_grad>}};
OpRegistrar tanh_grad_op{{"TanhGrad", infer_activation_grad}};

}  // namespace

Value relu(const Scope& s, Value x) { return s.op("Relu", {x}); }
Value relu6(const Scope& s, Value x) { return s.op("Relu6", {x}); }
Value elu(const Scope& s, Value x) { return s.op("Elu", {x}); }
Value sigmoid(const Scope& s, Value x) { return s.op("Sigmoid", {x}); }
Value tanh(const Scope& s, Value x) { return s.op("Tanh", {x}); }

Value relu_grad(const Scope& s, Value dy, Value y) { return s.op("ReluGrad", {dy, y}); }
Value relu6_grad(const Scope& s, Value dy, Value y) { return s.op("Relu6Grad", {dy, y}); }
Value elu_grad(const Scope& s, Value dy, Value y) { return s.op("EluGrad", {dy, y}); }
Value sigmoid_grad(const Scope& s, Value dy, Value y) { return s.op("SigmoidGrad", {dy, y}); }
Value tanh_grad(const Scope& s, Value dy, Value y) { return s.op("TanhGrad", {dy, y}); }

}  // namespace tower::ops
