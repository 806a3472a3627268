#include "tower/ops/dropout.h"

#include <cmath>

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

std::vector<TensorSpec> infer_dropout(const Node& n) {
  expect_num_inputs(n, 1);
  expect_dtype(n, 0, DType::f32);
  float keep_prob = n.attr<DropoutAttrs>().keep_prob;
  if (!(keep_prob > 0.0f && keep_prob <= 1.0f))
    fail_node(n, fmt::format("keep_prob must be in (0, 1], got {}", keep_prob));
  return {{n.inputs[0].shape(), DType::f32}};
}

OpRegistrar dropout_op{
    {"Dropout", infer_dropout, [](const Scope& s, const Node& n, const std::vector<Value>& g) {
       DropoutAttrs attrs = n.attr<DropoutAttrs>();
       attrs.key_node = n.id;  // the same mask as the forward pass
       return std::vector<Value>{s.op("DropoutGrad", {g[0]}, attrs)};
     }}};

OpRegistrar dropout_grad_op{{"DropoutGrad", infer_dropout, {}}};

}  // namespace

Value dropout(const Scope& s, Value x, float keep_prob, uint64_t seed_salt) {
  return s.op("Dropout", {x}, DropoutAttrs{keep_prob, s.graph().seed, seed_salt, -1});
}

}  // namespace tower::ops
