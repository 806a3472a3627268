#include "tower/ops/conv.h"

#include <algorithm>

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

void check_attrs(const Node& n, const Conv2DAttrs& a) {
  if (a.strides[0] < 1 || a.strides[1] < 1)
    fail_node(n, fmt::format("strides must be >= 1, got ({}, {})", a.strides[0], a.strides[1]));
  if (a.dilations[0] < 1 || a.dilations[1] < 1)
    fail_node(n,
              fmt::format("dilations must be >= 1, got ({}, {})", a.dilations[0], a.dilations[1]));
  if (a.groups < 1) fail_node(n, fmt::format("groups must be >= 1, got {}", a.groups));
  if (a.pads[0] < 0 || a.pads[1] < 0)
    fail_node(n, fmt::format("pads must be >= 0, got ({}, {})", a.pads[0], a.pads[1]));
}

// Given pads that are what SAME pads on this input become SAME, so that the kernels made for
// SAME convolutions (Winograd, the adjoint) serve torchvision's layers too.
Conv2DAttrs canonical(const Shape& x, const Shape& w, Conv2DAttrs a) {
  if (a.padding != Padding::given || x.rank() != 4 || w.rank() != 4) return a;
  Conv2DAttrs same = a;
  same.padding = Padding::same;
  same.pads = {0, 0};
  const auto [gh, gw] = conv_padding(x, w, a);
  const auto [sh, sw] = conv_padding(x, w, same);
  const auto equal = [](const AxisPadding& p, const AxisPadding& q) {
    return p.out == q.out && p.before == q.before && p.after == q.after;
  };
  return equal(gh, sh) && equal(gw, sw) ? same : a;
}

// The output shape of conv2d(x, w), or a message naming the mismatch.
Shape conv_output(const Node& n, const Shape& x, const Shape& w, const Conv2DAttrs& a) {
  check_attrs(n, a);
  if (x.rank() != 4)
    fail_node(n, fmt::format("images must be NCHW (rank 4), got {}", x.to_string()));
  if (w.rank() != 4)
    fail_node(n, fmt::format("filter must be (K, C, KH, KW) (rank 4), got {}", w.to_string()));
  if (x[1] != w[1] * a.groups)
    fail_node(n, a.groups == 1
                     ? fmt::format("images have {} channels but the filter expects {}", x[1], w[1])
                     : fmt::format("images have {} channels but the filter expects {} groups of {}",
                                   x[1], a.groups, w[1]));
  if (w[0] % a.groups != 0)
    fail_node(n, fmt::format("{} output channels do not divide into {} groups", w[0], a.groups));
  if (w[2] < 1 || w[3] < 1) fail_node(n, fmt::format("empty filter window {}", w.to_string()));
  const auto [ph, pw] = conv_padding(x, w, a);
  if (ph.out < 1 || pw.out < 1)
    fail_node(
        n, fmt::format("the {}x{} filter{} gives no output on {}x{} images with {} padding", w[2],
                       w[3],
                       a.dilations == std::array<int64_t, 2>{1, 1}
                           ? ""
                           : fmt::format(" dilated by ({}, {})", a.dilations[0], a.dilations[1]),
                       x[2], x[3], padding_name(a.padding, a.pads)));
  return Shape{x[0], w[0], ph.out, pw.out};
}

void expect_f32(const Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i) expect_dtype(n, static_cast<int>(i), DType::f32);
}

OpRegistrar conv2d_op{{"Conv2D",
                       [](const Node& n) {
                         expect_num_inputs(n, 2);
                         expect_f32(n);
                         return std::vector<TensorSpec>{{conv_output(
                             n, n.inputs[0].shape(), n.inputs[1].shape(), n.attr<Conv2DAttrs>())}};
                       },
                       [](const Scope& s, const Node& n, const Grads& g) {
                         const auto& a = n.attr<Conv2DAttrs>();
                         Value x = n.inputs[0], w = n.inputs[1];
                         return Grads{conv2d_backprop_input(s, w, g[0], x.shape(), a),
                                      conv2d_backprop_filter(s, x, g[0], w.shape(), a)};
                       }}};

// dy must be what Conv2D would produce from the x and w shapes the gradient is for.
void check_backprop(const Node& n, const Shape& x, const Shape& w, const Shape& dy,
                    const Conv2DAttrs& a) {
  Shape expected = conv_output(n, x, w, a);
  if (dy != expected)
    fail_node(n, fmt::format("the output gradient has shape {}, but Conv2D of {} by {} gives {}",
                             dy.to_string(), x.to_string(), w.to_string(), expected.to_string()));
}

// The adjoints are linear in each input, so they would differentiate into Conv2D nodes again;
// second derivatives are not needed yet.
OpRegistrar conv2d_backprop_input_op{{"Conv2DBackpropInput", [](const Node& n) {
                                        expect_num_inputs(n, 2);
                                        expect_f32(n);
                                        const auto& a = n.attr<Conv2DBackpropAttrs>();
                                        check_backprop(n, a.shape, n.inputs[0].shape(),
                                                       n.inputs[1].shape(), a.conv);
                                        return std::vector<TensorSpec>{{a.shape}};
                                      }}};

OpRegistrar conv2d_backprop_filter_op{{"Conv2DBackpropFilter", [](const Node& n) {
                                         expect_num_inputs(n, 2);
                                         expect_f32(n);
                                         const auto& a = n.attr<Conv2DBackpropAttrs>();
                                         check_backprop(n, n.inputs[0].shape(), a.shape,
                                                        n.inputs[1].shape(), a.conv);
                                         return std::vector<TensorSpec>{{a.shape}};
                                       }}};

}  // namespace

AxisPadding axis_padding(int64_t in, int64_t k, int64_t stride, Padding padding, int64_t pad) {
  if (padding == Padding::valid) return {(in - k + stride) / stride, 0, 0};
  if (padding == Padding::given) {
    const int64_t span = in + 2 * pad - k;
    return {span < 0 ? 0 : span / stride + 1, pad, pad};
  }
  int64_t out = (in + stride - 1) / stride;
  int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
  return {out, total / 2, total - total / 2};
}

std::string padding_name(Padding padding, std::array<int64_t, 2> pads) {
  if (padding == Padding::given) return fmt::format("pads ({}, {})", pads[0], pads[1]);
  return padding == Padding::same ? "SAME" : "VALID";
}

std::array<AxisPadding, 2> conv_padding(const Shape& x, const Shape& w, const Conv2DAttrs& a) {
  return {axis_padding(x[2], (w[2] - 1) * a.dilations[0] + 1, a.strides[0], a.padding, a.pads[0]),
          axis_padding(x[3], (w[3] - 1) * a.dilations[1] + 1, a.strides[1], a.padding, a.pads[1])};
}

Value conv2d(const Scope& s, Value x, Value w, const Conv2DAttrs& attrs) {
  return s.op("Conv2D", {x, w}, canonical(x.shape(), w.shape(), attrs));
}

Value conv2d_backprop_input(const Scope& s, Value w, Value dy, const Shape& x_shape,
                            const Conv2DAttrs& attrs) {
  return s.op("Conv2DBackpropInput", {w, dy}, Conv2DBackpropAttrs{attrs, x_shape});
}

Value conv2d_backprop_filter(const Scope& s, Value x, Value dy, const Shape& w_shape,
                             const Conv2DAttrs& attrs) {
  return s.op("Conv2DBackpropFilter", {x, dy}, Conv2DBackpropAttrs{attrs, w_shape});
}

}  // namespace tower::ops
