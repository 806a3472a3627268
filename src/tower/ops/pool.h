// Max and average pooling over the H, W axes of NCHW f32 images, TensorFlow semantics: SAME
// padding as in conv.h; max pooling ignores padded positions, average pooling divides by the
// number of real (non-padded) elements in each window.
#pragma once

#include <array>
#include <cstdint>

#include "tower/graph/graph.h"
#include "tower/ops/conv.h"

namespace tower::ops {

struct PoolAttrs {
  std::array<int64_t, 2> ksize{2, 2};
  std::array<int64_t, 2> strides{2, 2};
  Padding padding = Padding::valid;
  std::array<int64_t, 2> pads{0, 0};  // rows and columns on each side, with Padding::given
};
// The rows and columns of pooling x (NCHW).
std::array<AxisPadding, 2> pool_padding(const Shape& x, const PoolAttrs& attrs);

// AvgPoolGrad (input dy): the pooled input's shape, which dy alone does not determine.
struct PoolGradAttrs {
  PoolAttrs pool;
  Shape input_shape;
};

Value max_pool(const Scope& s, Value x, const PoolAttrs& attrs = {});
Value avg_pool(const Scope& s, Value x, const PoolAttrs& attrs = {});
// dx of max_pool given x and dy (the argmax is recomputed from x).
Value max_pool_grad(const Scope& s, Value x, Value dy, const PoolAttrs& attrs);
Value avg_pool_grad(const Scope& s, Value dy, const Shape& x_shape, const PoolAttrs& attrs);

}  // namespace tower::ops
