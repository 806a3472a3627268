#include "tower/ops/math.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

void expect_all_f32(const Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i) expect_dtype(n, static_cast<int>(i), DType::f32);
}

// b broadcasts into a when it is a's trailing dims (a scalar and a's own shape are special cases).
bool is_trailing(const Shape& b, const Shape& a) {
  if (b.rank() > a.rank()) return false;
  for (int i = 1; i <= b.rank(); ++i)
    if (b[b.rank() - i] != a[a.rank() - i]) return false;
  return true;
}

// The gradient of a broadcast operand: dy summed down to the operand's shape.
Value reduce_to(const Scope& s, Value dy, const Shape& shape) {
  return dy.shape() == shape ? dy : sum_to_shape(s, dy, shape);
}

std::vector<TensorSpec> infer_binary(const Node& n) {
  expect_num_inputs(n, 2);
  expect_all_f32(n);
  const Shape& a = n.inputs[0].shape();
  const Shape& b = n.inputs[1].shape();
  if (!is_trailing(b, a))
    fail_node(n, fmt::format("the second input {} must have the first's shape {}, be a scalar (), "
                             "or equal its trailing dims",
                             b.to_string(), a.to_string()));
  return {{a, DType::f32}};
}

std::vector<TensorSpec> infer_unary(const Node& n) {
  expect_num_inputs(n, 1);
  expect_all_f32(n);
  return {{n.inputs[0].shape(), DType::f32}};
}

OpRegistrar add_op{{"Add", infer_binary, [](const Scope& s, const Node& n, const Grads& g) {
                      return Grads{g[0], reduce_to(s, g[0], n.inputs[1].shape())};
                    }}};

OpRegistrar sub_op{{"Sub", infer_binary, [](const Scope& s, const Node& n, const Grads& g) {
                      return Grads{g[0], scale(s, reduce_to(s, g[0], n.inputs[1].shape()), -1.0f)};
                    }}};

OpRegistrar mul_op{{"Mul", infer_binary, [](const Scope& s, const Node& n, const Grads& g) {
                      Value da = mul(s, g[0], n.inputs[1]);
                      Value db = reduce_to(s, mul(s, g[0], n.inputs[0]), n.inputs[1].shape());
                      return Grads{da, db};
                    }}};

OpRegistrar scale_op{{"Scale", infer_unary, [](const Scope& s, const Node& n, const Grads& g) {
                        return Grads{scale(s, g[0], n.attr<ScaleAttrs>().factor)};
                      }}};

// d(x^2) = 2x dx
OpRegistrar square_op{{"Square", infer_unary, [](const Scope& s, const Node& n, const Grads& g) {
                         return Grads{mul(s, g[0], scale(s, n.inputs[0], 2.0f))};
                       }}};

OpRegistrar add_n_op{
    {"AddN",
     [](const Node& n) {
       if (n.inputs.empty()) fail_node(n, "needs at least one input");
       expect_all_f32(n);
       const Shape& shape = n.inputs[0].shape();
       for (size_t i = 1; i < n.inputs.size(); ++i)
         if (n.inputs[i].shape() != shape)
           fail_node(n, fmt::format("input {} has shape {}, but input 0 has {}", i,
                                    n.inputs[i].shape().to_string(), shape.to_string()));
       return std::vector<TensorSpec>{{shape, DType::f32}};
     },
     [](const Scope& s, const Node& n, const Grads& g) { return Grads(n.inputs.size(), g[0]); }}};

// Which axes of the input ReduceSum sums over (validated by its infer function).
std::vector<char> reduced_axes(const Node& n) {
  int rank = n.inputs[0].shape().rank();
  std::vector<char> reduced(static_cast<size_t>(rank), 0);
  for (int axis : n.attr<ReduceSumAttrs>().axes) {
    int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
      fail_node(n, fmt::format("axis {} is out of range for an input of rank {}", axis, rank));
    if (reduced[static_cast<size_t>(a)]) fail_node(n, fmt::format("axis {} is listed twice", axis));
    reduced[static_cast<size_t>(a)] = 1;
  }
  return reduced;
}

// The output shape of ReduceSum as if keep_dims were set (reduced axes become 1).
Shape kept_shape(const Node& n) {
  std::vector<char> reduced = reduced_axes(n);
  std::vector<int64_t> dims = n.inputs[0].shape().dims();
  for (size_t i = 0; i < dims.size(); ++i)
    if (reduced[i]) dims[i] = 1;
  return Shape(dims);
}

OpRegistrar reduce_sum_op{{"ReduceSum",
                           [](const Node& n) {
                             expect_num_inputs(n, 1);
                             expect_all_f32(n);
                             std::vector<char> reduced = reduced_axes(n);
                             std::vector<int64_t> dims;
                             bool keep = n.attr<ReduceSumAttrs>().keep_dims == KeepDims::yes;
                             for (size_t i = 0; i < reduced.size(); ++i)
                               if (!reduced[i])
                                 dims.push_back(n.inputs[0].shape()[static_cast<int>(i)]);
                               else if (keep)
                                 dims.push_back(1);
                             return std::vector<TensorSpec>{{Shape(dims), DType::f32}};
                           },
                           [](const Scope& s, const Node& n, const Grads& g) {
                             Shape kept = kept_shape(n);
                             Value dy = g[0].shape() == kept ? g[0] : reshape(s, g[0], kept);
                             return Grads{broadcast_to(s, dy, n.inputs[0].shape())};
                           }}};

OpRegistrar l2_loss_op{{"L2Loss",
                        [](const Node& n) {
                          expect_num_inputs(n, 1);
                          expect_all_f32(n);
                          return std::vector<TensorSpec>{{Shape{}, DType::f32}};
                        },
                        // d(sum(x^2)/2) = x dx; dy is a scalar
                        [](const Scope& s, const Node& n, const Grads& g) {
                          return Grads{mul(s, n.inputs[0], g[0])};
                        }}};

OpRegistrar reshape_op{{"Reshape",
                        [](const Node& n) {
                          expect_num_inputs(n, 1);
                          const Shape& to = n.attr<ShapeAttrs>().shape;
                          const Shape& from = n.inputs[0].shape();
                          if (to.numel() != from.numel())
                            fail_node(n, fmt::format("cannot reshape {} ({} elements) to {} ({} "
                                                     "elements)",
                                                     from.to_string(), from.numel(), to.to_string(),
                                                     to.numel()));
                          return std::vector<TensorSpec>{{to, n.inputs[0].dtype()}};
                        },
                        [](const Scope& s, const Node& n, const Grads& g) {
                          return Grads{reshape(s, g[0], n.inputs[0].shape())};
                        }}};

// NumPy rule, right-aligned: every dim of `small` equals the matching dim of `big` or is 1.
bool broadcastable(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  for (int i = 1; i <= small.rank(); ++i) {
    int64_t d = small[small.rank() - i];
    if (d != 1 && d != big[big.rank() - i]) return false;
  }
  return true;
}

OpRegistrar broadcast_to_op{
    {"BroadcastTo",
     [](const Node& n) {
       expect_num_inputs(n, 1);
       expect_all_f32(n);
       const Shape& to = n.attr<ShapeAttrs>().shape;
       if (!broadcastable(n.inputs[0].shape(), to))
         fail_node(n, fmt::format("cannot broadcast {} to {}: each dim must match or be 1",
                                  n.inputs[0].shape().to_string(), to.to_string()));
       return std::vector<TensorSpec>{{to, DType::f32}};
     },
     [](const Scope& s, const Node& n, const Grads& g) {
       return Grads{reduce_to(s, g[0], n.inputs[0].shape())};
     }}};

OpRegistrar sum_to_shape_op{
    {"SumToShape",
     [](const Node& n) {
       expect_num_inputs(n, 1);
       expect_all_f32(n);
       const Shape& to = n.attr<ShapeAttrs>().shape;
       if (!broadcastable(to, n.inputs[0].shape()))
         fail_node(n, fmt::format("cannot sum {} down to {}: {} must broadcast to the input",
                                  n.inputs[0].shape().to_string(), to.to_string(), to.to_string()));
       return std::vector<TensorSpec>{{to, DType::f32}};
     },
     [](const Scope& s, const Node& n, const Grads& g) {
       return Grads{broadcast_to(s, g[0], n.inputs[0].shape())};
     }}};

std::vector<int> all_axes(const Value& x) {
  std::vector<int> axes;
  for (int i = 0; i < x.shape().rank(); ++i) axes.push_back(i);
  return axes;
}

}  // namespace

Value add(const Scope& s, Value a, Value b) { return s.op("Add", {a, b}); }
Value sub(const Scope& s, Value a, Value b) { return s.op("Sub", {a, b}); }
Value mul(const Scope& s, Value a, Value b) { return s.op("Mul", {a, b}); }
Value scale(const Scope& s, Value x, float factor) {
  return s.op("Scale", {x}, ScaleAttrs{factor});
}
Value square(const Scope& s, Value x) { return s.op("Square", {x}); }

Value add_n(const Scope& s, const std::vector<Value>& values) {
  if (values.empty()) fail("add_n: needs at least one value");
  if (values.size() == 1) return values[0];
  return s.op("AddN", values);
}

Value reduce_sum(const Scope& s, Value x) { return reduce_sum(s, x, all_axes(x)); }

Value reduce_sum(const Scope& s, Value x, std::vector<int> axes, KeepDims keep_dims) {
  return s.op("ReduceSum", {x}, ReduceSumAttrs{std::move(axes), keep_dims});
}

Value reduce_mean(const Scope& s, Value x) { return reduce_mean(s, x, all_axes(x)); }

Value reduce_mean(const Scope& s, Value x, std::vector<int> axes, KeepDims keep_dims) {
  Value sum = reduce_sum(s, x, std::move(axes), keep_dims);
  // numel ratio = product of the reduced dims (0 for an empty input: the mean is NaN, as in TF)
  int64_t count = sum.shape().numel() == 0 ? 0 : x.shape().numel() / sum.shape().numel();
  return scale(s, sum, 1.0f / static_cast<float>(count));
}

Value l2_loss(const Scope& s, Value x) { return s.op("L2Loss", {x}); }

Value reshape(const Scope& s, Value x, Shape shape) {
  return s.op("Reshape", {x}, ShapeAttrs{std::move(shape)});
}

Value flatten(const Scope& s, Value x) {
  if (x.shape().rank() < 1)
    fail("flatten: '{}' must have a batch axis, got shape {}", x.name(), x.shape().to_string());
  int64_t rest = 1;
  for (int i = 1; i < x.shape().rank(); ++i) rest *= x.shape()[i];
  return reshape(s, x, Shape{x.shape()[0], rest});
}

Value broadcast_to(const Scope& s, Value x, Shape shape) {
  return s.op("BroadcastTo", {x}, ShapeAttrs{std::move(shape)});
}

Value sum_to_shape(const Scope& s, Value x, Shape shape) {
  return s.op("SumToShape", {x}, ShapeAttrs{std::move(shape)});
}

std::vector<char> summed_axes(const Node& node) {
  const Shape& in = node.inputs[0].shape();
  if (node.op == "ReduceSum") {
    std::vector<char> summed(static_cast<size_t>(in.rank()), 0);
    for (int axis : node.attr<ReduceSumAttrs>().axes)
      summed[static_cast<size_t>(axis < 0 ? axis + in.rank() : axis)] = 1;
    return summed;
  }
  const Shape& to = node.attr<ShapeAttrs>().shape;
  std::vector<char> summed(static_cast<size_t>(in.rank()), 1);
  for (int i = 1; i <= to.rank(); ++i)
    if (to[to.rank() - i] == in[in.rank() - i]) summed[static_cast<size_t>(in.rank() - i)] = 0;
  return summed;
}

}  // namespace tower::ops
