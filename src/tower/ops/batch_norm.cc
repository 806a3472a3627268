#include "tower/ops/batch_norm.h"

#include "tower/graph/op_registry.h"
#include "tower/ops/math.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

// x (N, C) or (N, C, H, W) f32, non-empty; inputs first..first+count-1 are (C,) f32.
void expect_batch_norm_inputs(const Node& n, int x_input, int first, int count) {
  for (size_t i = 0; i < n.inputs.size(); ++i) expect_dtype(n, static_cast<int>(i), DType::f32);
  const Shape& x = n.inputs[static_cast<size_t>(x_input)].shape();
  if (x.rank() != 2 && x.rank() != 4)
    fail_node(n, fmt::format("x must be (N, C) or (N, C, H, W), got {}", x.to_string()));
  if (x.numel() == 0) fail_node(n, "x is empty: batch statistics need at least one element");
  Shape channels{x[1]};
  for (int i = first; i < first + count; ++i)
    if (n.inputs[static_cast<size_t>(i)].shape() != channels)
      fail_node(n, fmt::format("input {} must be {} (one entry per channel of x {}), got {}", i,
                               channels.to_string(), x.to_string(),
                               n.inputs[static_cast<size_t>(i)].shape().to_string()));
  float epsilon = n.attr<BatchNormAttrs>().epsilon;
  if (!(epsilon >= 0.0f)) fail_node(n, fmt::format("epsilon must be >= 0, got {}", epsilon));
}

// Inputs (x, gamma, beta, moving_mean, moving_var); outputs (y, mean, variance), the statistics
// used to normalize (the batch's, biased, when training; the moving ones in inference).
OpRegistrar batch_norm_op{
    {"FusedBatchNorm",
     [](const Node& n) {
       expect_num_inputs(n, 5);
       expect_batch_norm_inputs(n, 0, 1, 4);
       Shape channels{n.inputs[0].shape()[1]};
       return std::vector<TensorSpec>{
           {n.inputs[0].shape(), DType::f32}, {channels, DType::f32}, {channels, DType::f32}};
     },
     [](const Scope& s, const Node& n, const Grads& g) {
       if (g[1].defined() || g[2].defined() || !g[0].defined())
         fail_node(n, "only y is differentiable, not the batch mean or variance outputs");
       Node& grad = s.op_node(
           "FusedBatchNormGrad",
           {g[0], n.inputs[0], n.inputs[1], n.inputs[2], n.output(1), n.output(2)}, n.attrs);
       return Grads{grad.output(0), grad.output(1), grad.output(2), Value{}, Value{}};
     }}};

// Inputs (dy, x, gamma, beta, mean, variance) with mean and variance the forward's outputs 1 and
// 2; outputs (dx, dgamma, dbeta). In training mode dx includes the paths through the batch
// statistics; in inference mode they are constants. beta does not enter the gradient, but
// oneDNN 2.6 refuses to run the backward primitive without it.
OpRegistrar batch_norm_grad_op{{"FusedBatchNormGrad",
                                [](const Node& n) {
                                  expect_num_inputs(n, 6);
                                  expect_batch_norm_inputs(n, 1, 2, 4);
                                  if (n.inputs[0].shape() != n.inputs[1].shape())
                                    fail_node(n, "dy must have the shape of x");
                                  Shape channels{n.inputs[1].shape()[1]};
                                  return std::vector<TensorSpec>{{n.inputs[1].shape(), DType::f32},
                                                                 {channels, DType::f32},
                                                                 {channels, DType::f32}};
                                },
                                {}}};

OpRegistrar assign_moving_average_op{
    {"AssignMovingAverage",
     [](const Node& n) {
       expect_num_inputs(n, 2);
       expect_dtype(n, 0, DType::f32);
       expect_dtype(n, 1, DType::f32);
       if (n.inputs[0].node->op != "Variable")
         fail_node(n, fmt::format("the first input must be a variable (it is updated in place), "
                                  "got the output of a {} op",
                                  n.inputs[0].node->op));
       if (n.inputs[0].shape() != n.inputs[1].shape())
         fail_node(n, "the variable and the value must have one shape");
       float decay = n.attr<AssignMovingAverageAttrs>().decay;
       if (!(decay >= 0.0f && decay <= 1.0f))
         fail_node(n, fmt::format("decay must be in [0, 1], got {}", decay));
       return std::vector<TensorSpec>{{n.inputs[0].shape(), DType::f32}};
     },
     {}}};

}  // namespace

BatchNormResult batch_norm(const Scope& s, Value x, Value gamma, Value beta, Value moving_mean,
                           Value moving_var, BatchNormAttrs attrs) {
  Node& bn = s.op_node("FusedBatchNorm", {x, gamma, beta, moving_mean, moving_var}, attrs);
  BatchNormResult result{bn.output(0), {}};
  if (attrs.mode == BatchNormMode::inference) return result;
  int64_t count = x.shape().numel() / x.shape()[1];  // elements per channel
  Value var = bn.output(2);
  if (count > 1) var = scale(s, var, static_cast<float>(count) / static_cast<float>(count - 1));
  result.updates = {assign_moving_average(s, moving_mean, bn.output(1), attrs.momentum),
                    assign_moving_average(s, moving_var, var, attrs.momentum)};
  return result;
}

Value assign_moving_average(const Scope& s, Value variable, Value value, float decay) {
  return s.op("AssignMovingAverage", {variable, value}, AssignMovingAverageAttrs{decay});
}

std::vector<MovingAverageUpdate> moving_average_updates(const std::vector<Value>& updates) {
  std::vector<MovingAverageUpdate> found;
  for (const Value& u : updates) {
    if (u.node->op != "AssignMovingAverage") continue;
    found.push_back({u.node->inputs[0].node->attr<VariableAttrs>().name, u.node->inputs[1],
                     u.node->attr<AssignMovingAverageAttrs>().decay});
  }
  return found;
}

void set_moving_average_decay(const std::vector<Value>& updates, float decay) {
  for (const Value& u : updates)
    if (u.node->op == "AssignMovingAverage") u.node->attrs = AssignMovingAverageAttrs{decay};
}

}  // namespace tower::ops
