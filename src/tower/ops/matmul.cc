#include "tower/ops/matmul.h"

#include "tower/graph/op_registry.h"

namespace tower::ops {
namespace {

constexpr Transpose N = Transpose::no, T = Transpose::yes;

std::vector<TensorSpec> infer_matmul(const Node& n) {
  expect_num_inputs(n, 2);
  expect_rank(n, 0, 2);
  expect_rank(n, 1, 2);
  expect_dtype(n, 0, DType::f32);
  expect_dtype(n, 1, DType::f32);
  const auto& attrs = n.attr<MatMulAttrs>();
  const Shape& a = n.inputs[0].shape();
  const Shape& b = n.inputs[1].shape();
  bool ta = attrs.transpose_a == T, tb = attrs.transpose_b == T;
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], nb = tb ? b[0] : b[1];
  if (ka != kb)
    fail_node(n, fmt::format("inner dimensions differ: a {}{} has K={}, b {}{} has K={}",
                             a.to_string(), ta ? " (transposed)" : "", ka, b.to_string(),
                             tb ? " (transposed)" : "", kb));
  return {{Shape{m, nb}, DType::f32}};
}

// y = op(a) op(b), with dy (M, N) and ' for transpose:
//   y = a  b     : da = dy b'        db = a' dy
//   y = a' b     : da = b dy'        db = a dy
//   y = a  b'    : da = dy b         db = dy' a
//   y = a' b'    : da = b' dy'       db = dy' a'
// Each is one MatMul with transpose flags, so no transposed copy is ever materialized.
std::vector<Value> grad_matmul(const Scope& s, const Node& n, const std::vector<Value>& g) {
  const auto& attrs = n.attr<MatMulAttrs>();
  Value a = n.inputs[0], b = n.inputs[1], dy = g[0];
  bool ta = attrs.transpose_a == T, tb = attrs.transpose_b == T;
  if (!ta && !tb) return {matmul(s, dy, b, N, T), matmul(s, a, dy, T, N)};
  if (ta && !tb) return {matmul(s, b, dy, N, T), matmul(s, a, dy, N, N)};
  if (!ta && tb) return {matmul(s, dy, b, N, N), matmul(s, dy, a, T, N)};
  return {matmul(s, b, dy, T, T), matmul(s, dy, a, T, T)};
}

OpRegistrar matmul_op{{"MatMul", infer_matmul, grad_matmul}};

}  // namespace

Value matmul(const Scope& s, Value a, Value b, Transpose ta, Transpose tb) {
  return s.op("MatMul", {a, b}, MatMulAttrs{ta, tb});
}

}  // namespace tower::ops
