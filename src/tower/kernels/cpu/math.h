// Loops of the math kernels (math.cc) that other CPU kernels reuse (only kernel files include
// this).
#pragma once

#include <cstdint>

namespace tower::cpu {

// The residual fusions' loop: with s = a[i] + b[i], y[i] = s > 0 ? s : 0 (mask null: a sum and
// the ReLU after it, as oneDNN's ReLU), or y[i] = mask[i] > 0 ? s : 0 * s (a ReLU's gradient of
// a sum of gradients, as oneDNN's). Vectorized for the process's ISA level (clones.h).
void add_two_relu(const float* a, const float* b, const float* mask, float* y, int64_t n);

}  // namespace tower::cpu
