#include "tower/ops/nn_loss.h"

#include "tower/graph/op_registry.h"
#include "tower/ops/math.h"

namespace tower::ops {
namespace {

using Grads = std::vector<Value>;

// logits (N, K) f32 with K >= 1 and labels (N,) i32.
void expect_logits_and_labels(const Node& n) {
  expect_rank(n, 0, 2);
  expect_rank(n, 1, 1);
  expect_dtype(n, 0, DType::f32);
  expect_dtype(n, 1, DType::i32);
  const Shape& logits = n.inputs[0].shape();
  if (n.inputs[1].shape()[0] != logits[0])
    fail_node(n, fmt::format("labels {} must have one entry per row of logits {}",
                             n.inputs[1].shape().to_string(), logits.to_string()));
  if (logits[1] < 1) fail_node(n, "logits need at least one class");
  if (const auto* a = std::any_cast<SoftmaxCrossEntropyAttrs>(&n.attrs)) {
    if (!(a->label_smoothing >= 0 && a->label_smoothing < 1))
      fail_node(n, fmt::format("label smoothing must be in [0, 1), got {}", a->label_smoothing));
    if (!a->class_weights.empty() && static_cast<int64_t>(a->class_weights.size()) != logits[1])
      fail_node(n,
                fmt::format("{} class weights for {} classes", a->class_weights.size(), logits[1]));
  }
}

OpRegistrar xent_op{
    {"SparseSoftmaxCrossEntropyWithLogits",
     [](const Node& n) {
       expect_num_inputs(n, 2);
       expect_logits_and_labels(n);
       return std::vector<TensorSpec>{{Shape{n.inputs[0].shape()[0]}, DType::f32}};
     },
     // d loss_i / d logits_ij = w_label_i (softmax_ij - target_ij); labels get none.
     [](const Scope& s, const Node& n, const Grads& g) {
       Value dlogits = s.op("SparseSoftmaxXentGrad", {n.inputs[0], n.inputs[1], g[0]}, n.attrs);
       return Grads{dlogits, Value{}};
     }}};

// (logits, labels, dy (N,)) -> (softmax(logits) - onehot(labels)) * dy[:, None]; recomputes the
// softmax rather than keeping an (N, K) buffer alive from the forward pass.
OpRegistrar xent_grad_op{{"SparseSoftmaxXentGrad",
                          [](const Node& n) {
                            expect_num_inputs(n, 3);
                            expect_logits_and_labels(n);
                            expect_dtype(n, 2, DType::f32);
                            if (n.inputs[2].shape() != n.inputs[1].shape())
                              fail_node(n, "dy must have the shape of labels");
                            return std::vector<TensorSpec>{{n.inputs[0].shape(), DType::f32}};
                          },
                          {}}};

OpRegistrar softmax_op{{"Softmax",
                        [](const Node& n) {
                          expect_num_inputs(n, 1);
                          expect_dtype(n, 0, DType::f32);
                          if (n.inputs[0].shape().rank() < 1)
                            fail_node(n, "needs at least one axis");
                          return std::vector<TensorSpec>{{n.inputs[0].shape(), DType::f32}};
                        },
                        [](const Scope& s, const Node& n, const Grads& g) {
                          Value y = n.output(0);
                          return Grads{s.op("SoftmaxGrad", {y, g[0]})};
                        }}};

// (y, dy) -> dx = y * (dy - sum(dy * y, last axis)), one pass per row.
OpRegistrar softmax_grad_op{{"SoftmaxGrad",
                             [](const Node& n) {
                               expect_num_inputs(n, 2);
                               expect_dtype(n, 0, DType::f32);
                               expect_dtype(n, 1, DType::f32);
                               if (n.inputs[0].shape() != n.inputs[1].shape())
                                 fail_node(n, "y and dy must have one shape");
                               return std::vector<TensorSpec>{{n.inputs[0].shape(), DType::f32}};
                             },
                             {}}};

OpRegistrar argmax_op{{"ArgMax",
                       [](const Node& n) {
                         expect_num_inputs(n, 1);
                         expect_dtype(n, 0, DType::f32);
                         const Shape& x = n.inputs[0].shape();
                         if (x.rank() < 1 || x[x.rank() - 1] < 1)
                           fail_node(n, "needs a last axis with at least one entry");
                         std::vector<int64_t> dims(x.dims().begin(), x.dims().end() - 1);
                         return std::vector<TensorSpec>{{Shape(dims), DType::i32}};
                       },
                       {}}};

OpRegistrar in_top_k_op{
    {"InTopK",
     [](const Node& n) {
       expect_num_inputs(n, 2);
       expect_logits_and_labels(n);
       if (n.attr<InTopKAttrs>().k < 0)
         fail_node(n, fmt::format("k must be >= 0, got {}", n.attr<InTopKAttrs>().k));
       return std::vector<TensorSpec>{{Shape{n.inputs[0].shape()[0]}, DType::f32}};
     },
     {}}};

}  // namespace

Value sparse_softmax_cross_entropy_with_logits(const Scope& s, Value logits, Value labels,
                                               SoftmaxCrossEntropyAttrs attrs) {
  if (attrs.label_smoothing == 0 && attrs.class_weights.empty())
    return s.op("SparseSoftmaxCrossEntropyWithLogits", {logits, labels});
  return s.op("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, std::move(attrs));
}

Value softmax(const Scope& s, Value logits) { return s.op("Softmax", {logits}); }

Value argmax(const Scope& s, Value x) { return s.op("ArgMax", {x}); }

Value in_top_k(const Scope& s, Value logits, Value labels, int k) {
  return s.op("InTopK", {logits, labels}, InTopKAttrs{k});
}

Value accuracy(const Scope& s, Value logits, Value labels) {
  return reduce_mean(s, in_top_k(s, logits, labels, 1));
}

}  // namespace tower::ops
