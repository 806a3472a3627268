#pragma once

#include <vector>

#include "tower/core/tensor.h"

namespace tower {

// TensorFlow's clip_by_global_norm, in place: scales every gradient by
// max_norm / max(global_norm, max_norm), where global_norm = sqrt(sum of all squared elements)
// (summed in double, in a fixed order, so every replica gets the same bits). Returns the global
// norm before clipping. A non-finite norm turns every gradient into NaN, as in TensorFlow, so
// the divergence shows instead of being hidden. Throws tower::Error unless max_norm > 0.
float clip_by_global_norm(const std::vector<Tensor*>& grads, float max_norm);

// The global norm alone (same order and precision as above).
double global_norm(const std::vector<const Tensor*>& tensors);

}  // namespace tower
