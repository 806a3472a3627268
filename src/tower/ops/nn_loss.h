// Classification losses and metrics. Logits are (N, K) f32, labels (N,) i32 class indices.
#pragma once

#include <vector>

#include "tower/graph/graph.h"

namespace tower::ops {

// Label smoothing e: the target is (1 - e) one_hot(label) + e / K. Class weights (K values, or
// none): example i's loss is times class_weights[label_i] (Keras' class_weight).
struct SoftmaxCrossEntropyAttrs {
  float label_smoothing = 0;
  std::vector<float> class_weights;
};

struct InTopKAttrs {
  int k = 1;
};

// Per-example loss (N,): logsumexp(logits[i]) - sum_j target_ij logits[i, j], the target the
// label's one-hot (smoothed by `attrs`), computed with the max subtracted (finite for any finite
// logits), times the label's class weight. A label outside [0, K) stops the step with a
// tower::Error naming the op, the example and the label. Op "SparseSoftmaxCrossEntropyWithLogits",
// gradient "SparseSoftmaxXentGrad" (with the same attributes).
Value sparse_softmax_cross_entropy_with_logits(const Scope& s, Value logits, Value labels,
                                               SoftmaxCrossEntropyAttrs attrs = {});
// Softmax over the last axis (op "Softmax").
Value softmax(const Scope& s, Value logits);
// Index of the largest entry of the last axis, i32, the first one on ties (op "ArgMax").
Value argmax(const Scope& s, Value x);
// (N,) f32, 1 where labels[i] is among the k largest logits of row i, ties counted in (TF
// semantics: fewer than k entries strictly larger). A label outside [0, K) or a row with a
// non-finite logit gives 0. Op "InTopK".
Value in_top_k(const Scope& s, Value logits, Value labels, int k);
// Scalar f32: the mean of in_top_k(k = 1).
Value accuracy(const Scope& s, Value logits, Value labels);

}  // namespace tower::ops
