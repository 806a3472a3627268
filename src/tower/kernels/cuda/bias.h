// Launchers of bias.cu, x viewed as (outer, channels, inner).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

// y = x + b[channel]
void launch_bias_add(const float* x, const float* b, float* y, int64_t outer, int64_t channels,
                     int64_t inner, cudaStream_t stream);
// db[c] = sum of dy over outer and inner
void launch_bias_add_grad(const float* dy, float* db, int64_t outer, int64_t channels,
                          int64_t inner, cudaStream_t stream);

}  // namespace tower::cuda
