#include "tower/ops/lrn.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

void check_lrn(const Node& n, const Shape& x) {
  if (x.rank() != 4)
    fail_node(n, fmt::format("images must be NCHW (rank 4), got {}", x.to_string()));
  const auto& a = n.attr<LRNAttrs>();
  if (a.depth_radius < 0)
    fail_node(n, fmt::format("depth_radius must be >= 0, got {}", a.depth_radius));
  if (!(a.bias > 0.0f) || !(a.alpha >= 0.0f) || !(a.beta >= 0.0f))
    fail_node(n, fmt::format("needs bias > 0, alpha >= 0 and beta >= 0, got bias {}, alpha {}, "
                             "beta {}",
                             a.bias, a.alpha, a.beta));
}

OpRegistrar lrn_op{{"LRN",
                    [](const Node& n) {
                      expect_num_inputs(n, 1);
                      expect_dtype(n, 0, DType::f32);
                      check_lrn(n, n.inputs[0].shape());
                      return std::vector<TensorSpec>{{n.inputs[0].shape()}};
                    },
                    [](const Scope& s, const Node& n, const Grads& g) {
                      return Grads{lrn_grad(s, n.inputs[0], g[0], n.attr<LRNAttrs>())};
                    }}};

// Inputs (x, dy).
OpRegistrar lrn_grad_op{{"LRNGrad", [](const Node& n) {
                           expect_num_inputs(n, 2);
                           expect_dtype(n, 0, DType::f32);
                           expect_dtype(n, 1, DType::f32);
                           check_lrn(n, n.inputs[0].shape());
                           if (n.inputs[1].shape() != n.inputs[0].shape())
                             fail_node(n, fmt::format("the output gradient {} must have the "
                                                      "input's shape {}",
                                                      n.inputs[1].shape().to_string(),
                                                      n.inputs[0].shape().to_string()));
                           return std::vector<TensorSpec>{{n.inputs[0].shape()}};
                         }}};

}  // namespace

Value lrn(const Scope& s, Value x, const LRNAttrs& attrs) { return s.op("LRN", {x}, attrs); }

Value lrn_grad(const Scope& s, Value x, Value dy, const LRNAttrs& attrs) {
  return s.op("LRNGrad", {x, dy}, attrs);
}

}  // namespace tower::ops
