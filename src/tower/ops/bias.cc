#include "tower/ops/bias.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

int channel_axis(const Node& n, int input) {
  const Shape& x = n.inputs[static_cast<size_t>(input)].shape();
  int axis = bias_channel_axis(x.rank());
  if (axis < 0)
    fail_node(n, fmt::format("input {} must be NCHW images (rank 4) or (N, C) (rank 2), got {}",
                             input, x.to_string()));
  return axis;
}

OpRegistrar bias_add_op{
    {"BiasAdd",
     [](const Node& n) {
       expect_num_inputs(n, 2);
       expect_dtype(n, 0, DType::f32);
       expect_dtype(n, 1, DType::f32);
       int axis = channel_axis(n, 0);
       const Shape& x = n.inputs[0].shape();
       const Shape& b = n.inputs[1].shape();
       if (b.rank() != 1 || b[0] != x[axis])
         fail_node(n, fmt::format("the bias must have shape ({},) to match the {} channels of {}, "
                                  "got {}",
                                  x[axis], x[axis], x.to_string(), b.to_string()));
       return std::vector<TensorSpec>{{x}};
     },
     [](const Scope& s, const Node& n, const Grads& g) {
       return Grads{g[0], bias_add_grad(s, g[0])};
     }}};

OpRegistrar bias_add_grad_op{{"BiasAddGrad", [](const Node& n) {
                                expect_num_inputs(n, 1);
                                expect_dtype(n, 0, DType::f32);
                                int axis = channel_axis(n, 0);
                                return std::vector<TensorSpec>{{Shape{n.inputs[0].shape()[axis]}}};
                              }}};

}  // namespace

int bias_channel_axis(int rank) { return rank == 4 || rank == 2 ? 1 : -1; }

Value bias_add(const Scope& s, Value x, Value b) { return s.op("BiasAdd", {x, b}); }
Value bias_add_grad(const Scope& s, Value dy) { return s.op("BiasAddGrad", {dy}); }

}  // namespace tower::ops
