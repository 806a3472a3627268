// Launchers of conv.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

// NCHW images (planes = N*C of h x w) into/from a zero-padded copy of (h + top + bottom) x
// (w + left + right): cuDNN pads symmetrically, TensorFlow's SAME may put one more pixel after.
void launch_pad(const float* x, float* padded, int64_t planes, int64_t h, int64_t w, int64_t top,
                int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);
void launch_crop(const float* padded, float* x, int64_t planes, int64_t h, int64_t w, int64_t top,
                 int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);

}  // namespace tower::cuda
