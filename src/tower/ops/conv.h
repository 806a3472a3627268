// 2-D convolution on NCHW f32 images with OIHW (K, C, KH, KW) filters, TensorFlow padding rules.
#pragma once

#include <array>
#include <cstdint>

#include "tower/graph/graph.h"

namespace tower::ops {

// SAME: out = ceil(in / stride), zero padding split as TensorFlow does (the odd pixel after).
// VALID: no padding, out = ceil((in - k + 1) / stride).
// GIVEN: the attrs' `pads` on both sides, out = floor((in + 2 pad - k) / stride) + 1 (PyTorch's
// padding; a stride-2 layer of torchvision pads 1 before where SAME pads 0).
enum class Padding { same, valid, given };

struct Conv2DAttrs {
  std::array<int64_t, 2> strides{1, 1};
  Padding padding = Padding::same;
  std::array<int64_t, 2> pads{0, 0};  // rows and columns on each side, with Padding::given
  // The C input and K output channels cut into `groups` groups, output group g computed from
  // input group g alone: the filter is (K, C / groups, KH, KW). groups == C == K: depthwise.
  int64_t groups = 1;
  // The filter's taps `dilations` pixels apart: a KH x KW filter spans (KH - 1) * dh + 1 rows.
  std::array<int64_t, 2> dilations{1, 1};
  // Neither groups nor dilation: what every specialized kernel requires.
  bool is_dense() const { return groups == 1 && dilations[0] == 1 && dilations[1] == 1; }
};

// Conv2DBackpropInput (inputs w, dy) and Conv2DBackpropFilter (inputs x, dy): `shape` is the
// shape of the gradient they produce (of x, resp. of w), which dy alone does not determine.
struct Conv2DBackpropAttrs {
  Conv2DAttrs conv;
  Shape shape;
};

// Padding of one spatial axis, as TensorFlow computes it.
struct AxisPadding {
  int64_t out = 0;
  int64_t before = 0;
  int64_t after = 0;
};
// Output size and padding for one axis; out <= 0 when a VALID window does not fit. `pad`: each
// side's, with Padding::given.
AxisPadding axis_padding(int64_t in, int64_t k, int64_t stride, Padding padding, int64_t pad = 0);
// "SAME", "VALID" or "pads (1, 1)", for messages.
std::string padding_name(Padding padding, std::array<int64_t, 2> pads);
// The rows and columns of conv2d(x, w) (x NCHW, w OIHW), the filter's dilation counted.
std::array<AxisPadding, 2> conv_padding(const Shape& x, const Shape& w, const Conv2DAttrs& attrs);

// x (N, C, H, W), w (K, C / groups, KH, KW) -> (N, K, OH, OW).
Value conv2d(const Scope& s, Value x, Value w, const Conv2DAttrs& attrs = {});
// The adjoints of conv2d with respect to x and to w.
Value conv2d_backprop_input(const Scope& s, Value w, Value dy, const Shape& x_shape,
                            const Conv2DAttrs& attrs);
Value conv2d_backprop_filter(const Scope& s, Value x, Value dy, const Shape& w_shape,
                             const Conv2DAttrs& attrs);

}  // namespace tower::ops
