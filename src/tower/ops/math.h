// Elementwise arithmetic, reductions and shape ops on f32 tensors.
//
// Binary ops (add, sub, mul) take `a` and a `b` that is either of a's shape, a scalar (shape ()),
// or a's trailing dims (a bias: a (N, C), b (C,)); their gradients sum over the broadcast axes.
#pragma once

#include <vector>

#include "tower/graph/graph.h"

namespace tower::ops {

enum class KeepDims : uint8_t { no, yes };

struct ScaleAttrs {  // Scale: y = factor * x
  float factor = 1.0f;
};
struct ReduceSumAttrs {  // ReduceSum: axes as given (negative from the end), checked by the op
  std::vector<int> axes;
  KeepDims keep_dims = KeepDims::no;
};
struct ShapeAttrs {  // Reshape, BroadcastTo, SumToShape: the output shape
  Shape shape;
};

Value add(const Scope& s, Value a, Value b);
Value sub(const Scope& s, Value a, Value b);
Value mul(const Scope& s, Value a, Value b);
Value scale(const Scope& s, Value x, float factor);
Value square(const Scope& s, Value x);
// Sum of values of one shape (op "AddN"); one value is returned as is.
Value add_n(const Scope& s, const std::vector<Value>& values);

// Sums over all axes to a scalar, or over `axes` (negative counts from the end).
Value reduce_sum(const Scope& s, Value x);
Value reduce_sum(const Scope& s, Value x, std::vector<int> axes, KeepDims keep_dims = KeepDims::no);
Value reduce_mean(const Scope& s, Value x);
Value reduce_mean(const Scope& s, Value x, std::vector<int> axes,
                  KeepDims keep_dims = KeepDims::no);
// sum(x^2) / 2, a scalar (weight decay).
Value l2_loss(const Scope& s, Value x);

Value reshape(const Scope& s, Value x, Shape shape);  // same number of elements
Value flatten(const Scope& s, Value x);               // (N, ...) -> (N, rest)
// NumPy broadcasting of x (right-aligned, dims equal or 1) to `shape`, and its adjoint: the sum
// of x over the axes that `shape` broadcasts.
Value broadcast_to(const Scope& s, Value x, Shape shape);
Value sum_to_shape(const Scope& s, Value x, Shape shape);

// For kernels: which input axes a ReduceSum or SumToShape node sums (1) or keeps (0).
// SumToShape sums the input's leading extra axes and those the target has as 1.
std::vector<char> summed_axes(const Node& node);

}  // namespace tower::ops
