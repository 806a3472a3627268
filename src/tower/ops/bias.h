// Per-channel bias: b (C,) added along axis 1 of NCHW images, or along the last axis of (N, C).
#pragma once

#include "tower/graph/graph.h"

namespace tower::ops {

Value bias_add(const Scope& s, Value x, Value b);
// The bias gradient: dy summed over every axis but the channel axis (op "BiasAddGrad").
Value bias_add_grad(const Scope& s, Value dy);

// The channel axis of a BiasAdd input of rank 2 or 4 (-1 for other ranks).
int bias_channel_axis(int rank);

}  // namespace tower::ops
