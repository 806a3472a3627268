#include "tower/ops/pool.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

Shape pool_output(const Node& n, const Shape& x, const PoolAttrs& a) {
  if (x.rank() != 4)
    fail_node(n, fmt::format("images must be NCHW (rank 4), got {}", x.to_string()));
  if (a.ksize[0] < 1 || a.ksize[1] < 1 || a.strides[0] < 1 || a.strides[1] < 1)
    fail_node(n, fmt::format("ksize ({}, {}) and strides ({}, {}) must be >= 1", a.ksize[0],
                             a.ksize[1], a.strides[0], a.strides[1]));
  // (PyTorch's rule: a window is never all padding)
  if (a.pads[0] < 0 || a.pads[1] < 0 || 2 * a.pads[0] > a.ksize[0] || 2 * a.pads[1] > a.ksize[1])
    fail_node(n, fmt::format("pads ({}, {}) must be >= 0 and at most half the {}x{} window",
                             a.pads[0], a.pads[1], a.ksize[0], a.ksize[1]));
  const auto [ph, pw] = pool_padding(x, a);
  if (ph.out < 1 || pw.out < 1)
    fail_node(n, fmt::format("the {}x{} window gives no output on {}x{} images with {} padding",
                             a.ksize[0], a.ksize[1], x[2], x[3], padding_name(a.padding, a.pads)));
  return Shape{x[0], x[1], ph.out, pw.out};
}

std::vector<TensorSpec> infer_pool(const Node& n) {
  expect_num_inputs(n, 1);
  expect_dtype(n, 0, DType::f32);
  return {{pool_output(n, n.inputs[0].shape(), n.attr<PoolAttrs>())}};
}

void check_dy(const Node& n, const Shape& x, const Shape& dy, const PoolAttrs& a) {
  Shape expected = pool_output(n, x, a);
  if (dy != expected)
    fail_node(n, fmt::format("the output gradient has shape {}, but pooling {} gives {}",
                             dy.to_string(), x.to_string(), expected.to_string()));
}

OpRegistrar max_pool_op{{"MaxPool", infer_pool, [](const Scope& s, const Node& n, const Grads& g) {
                           return Grads{max_pool_grad(s, n.inputs[0], g[0], n.attr<PoolAttrs>())};
                         }}};

OpRegistrar avg_pool_op{{"AvgPool", infer_pool, [](const Scope& s, const Node& n, const Grads& g) {
                           return Grads{
                               avg_pool_grad(s, g[0], n.inputs[0].shape(), n.attr<PoolAttrs>())};
                         }}};

// Inputs (x, dy).
OpRegistrar max_pool_grad_op{{"MaxPoolGrad", [](const Node& n) {
                                expect_num_inputs(n, 2);
                                expect_dtype(n, 0, DType::f32);
                                expect_dtype(n, 1, DType::f32);
                                check_dy(n, n.inputs[0].shape(), n.inputs[1].shape(),
                                         n.attr<PoolAttrs>());
                                return std::vector<TensorSpec>{{n.inputs[0].shape()}};
                              }}};

// Input dy; linear, so its gradient is AvgPool again.
OpRegistrar avg_pool_grad_op{{"AvgPoolGrad",
                              [](const Node& n) {
                                expect_num_inputs(n, 1);
                                expect_dtype(n, 0, DType::f32);
                                const auto& a = n.attr<PoolGradAttrs>();
                                check_dy(n, a.input_shape, n.inputs[0].shape(), a.pool);
                                return std::vector<TensorSpec>{{a.input_shape}};
                              },
                              [](const Scope& s, const Node& n, const Grads& g) {
                                return Grads{avg_pool(s, g[0], n.attr<PoolGradAttrs>().pool)};
                              }}};

}  // namespace

std::array<AxisPadding, 2> pool_padding(const Shape& x, const PoolAttrs& a) {
  return {axis_padding(x[2], a.ksize[0], a.strides[0], a.padding, a.pads[0]),
          axis_padding(x[3], a.ksize[1], a.strides[1], a.padding, a.pads[1])};
}

Value max_pool(const Scope& s, Value x, const PoolAttrs& attrs) {
  return s.op("MaxPool", {x}, attrs);
}

Value avg_pool(const Scope& s, Value x, const PoolAttrs& attrs) {
  return s.op("AvgPool", {x}, attrs);
}

Value max_pool_grad(const Scope& s, Value x, Value dy, const PoolAttrs& attrs) {
  return s.op("MaxPoolGrad", {x, dy}, attrs);
}

Value avg_pool_grad(const Scope& s, Value dy, const Shape& x_shape, const PoolAttrs& attrs) {
  return s.op("AvgPoolGrad", {dy}, PoolGradAttrs{attrs, x_shape});
}

}  // namespace tower::ops
