// Launchers of batch_norm.cu: per channel of x viewed as (n, c, plane).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

struct BatchNormDims {
  int64_t n = 0, c = 0, plane = 0;
};
// Batch mean and biased variance (two passes, in double), per channel.
void launch_batch_norm_stats(const float* x, float* mean, float* variance, const BatchNormDims& d,
                             cudaStream_t stream);
// y = gamma / sqrt(variance + epsilon) * (x - mean) + beta.
void launch_batch_norm_apply(const float* x, const float* gamma, const float* beta,
                             const float* mean, const float* variance, float epsilon, float* y,
                             const BatchNormDims& d, cudaStream_t stream);
// dgamma, dbeta, and dx (through the batch statistics when `training`).
void launch_batch_norm_grad(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* variance, float epsilon, bool training, float* dx,
                            float* dgamma, float* dbeta, const BatchNormDims& d,
                            cudaStream_t stream);
// variable = decay * variable + (1 - decay) * value; out = the new value.
void launch_assign_moving_average(float* variable, const float* value, float* out, float decay,
                                  int64_t n, cudaStream_t stream);

}  // namespace tower::cuda
