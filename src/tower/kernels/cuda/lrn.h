// Launchers of lrn.cu: LRN across channels, TensorFlow semantics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

struct LRNParams {
  int64_t batch = 0, channels = 0, plane = 0;
  int64_t radius = 0;
  float bias = 1, alpha = 1, beta = 0.5f;
};
void launch_lrn(const float* x, float* y, const LRNParams& p, cudaStream_t stream);
// `scratch`: 2 * batch*channels*plane floats.
void launch_lrn_grad(const float* x, const float* dy, float* dx, float* scratch, const LRNParams& p,
                     cudaStream_t stream);

}  // namespace tower::cuda
