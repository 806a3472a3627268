// Local response normalization across channels of NCHW f32 images, TensorFlow semantics:
//   sqr_sum[c] = sum of x[c']^2 for c' in [c - depth_radius, c + depth_radius] (within range),
//   out[c]     = x[c] / (bias + alpha * sqr_sum[c])^beta
// alpha is not divided by the window size (unlike oneDNN's and Caffe's definition).
#pragma once

#include <cstdint>

#include "tower/graph/graph.h"

namespace tower::ops {

struct LRNAttrs {
  int64_t depth_radius = 5;
  float bias = 1.0f;
  float alpha = 1.0f;
  float beta = 0.5f;
};

Value lrn(const Scope& s, Value x, const LRNAttrs& attrs = {});
// dx of lrn given x and dy (op "LRNGrad").
Value lrn_grad(const Scope& s, Value x, Value dy, const LRNAttrs& attrs);

}  // namespace tower::ops
