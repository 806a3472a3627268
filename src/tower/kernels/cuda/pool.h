// Launchers of pool.cu: NCHW pooling, TensorFlow padding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

// planes = N*C images of h x w pooled to oh x ow; window rows [oh*stride_h - top, + kh) clipped to
// the image (padded positions are ignored by max and not counted by the average).
struct PoolGeometry {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, top = 0, left = 0;
};
void launch_max_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream);
void launch_avg_pool(const float* x, float* y, const PoolGeometry& g, cudaStream_t stream);
// `argmax`: scratch of planes*oh*ow int32 (the window's first maximum, as the CPU kernel routes).
void launch_max_pool_grad(const float* x, const float* dy, float* dx, int32_t* argmax,
                          const PoolGeometry& g, cudaStream_t stream);
void launch_avg_pool_grad(const float* dy, float* dx, const PoolGeometry& g, cudaStream_t stream);

}  // namespace tower::cuda
