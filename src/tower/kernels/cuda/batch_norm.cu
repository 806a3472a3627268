// Batch normalization per channel of x viewed as (n, c, plane), with the formulas of the CPU
// kernel (oneDNN batch_normalization):
//   forward   y = gamma / sqrt(var + eps) * (x - mean) + beta (var biased: divided by n * plane)
//   backward  dbeta = sum dy, dgamma = sum dy (x - mean) / sqrt(var + eps),
//             dx = gamma / sqrt(var + eps) * (dy - dbeta / M - (x - mean) dgamma / sqrt(var + eps)
//             / M) in training (M = n * plane), dx = gamma / sqrt(var + eps) * dy with the moving
//             stats.
// Per-channel sums: one block per channel, each thread a fixed strided share in double, then a
// fixed tree (deterministic; the CPU sums in float, so results agree to float rounding).
#include "tower/kernels/cuda/batch_norm.h"
#include "tower/kernels/cuda/launch.cuh"

namespace tower::cuda {
namespace {

__device__ __forceinline__ int64_t channel_index(int64_t j, int64_t c, const BatchNormDims& d) {
  return (j / d.plane * d.c + c) * d.plane + j % d.plane;  // j-th element of channel c
}

__global__ void stats_kernel(const float* x, float* mean, float* variance, BatchNormDims d) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, m = d.n * d.plane;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) sum += x[channel_index(j, c, d)];
  const double mu = block_sum(sum, shared) / static_cast<double>(m);
  double sq = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const double diff = x[channel_index(j, c, d)] - mu;
    sq += diff * diff;
  }
  const double var = block_sum(sq, shared) / static_cast<double>(m);
  if (threadIdx.x == 0) {
    mean[c] = static_cast<float>(mu);
    variance[c] = static_cast<float>(var);
  }
}

__global__ void apply_kernel(const float* x, const float* gamma, const float* beta,
                             const float* mean, const float* variance, float epsilon, float* y,
                             BatchNormDims d, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i / d.plane % d.c;
    const float sm = gamma[c] / sqrtf(variance[c] + epsilon);
    y[i] = sm * (x[i] - mean[c]) + beta[c];
  }
}

__global__ void grad_sums_kernel(const float* dy, const float* x, const float* mean,
                                 const float* variance, float epsilon, float* dgamma, float* dbeta,
                                 BatchNormDims d) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, m = d.n * d.plane;
  const float mu = mean[c];
  double sum_dy = 0, sum_dy_xc = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t i = channel_index(j, c, d);
    sum_dy += dy[i];
    sum_dy_xc += static_cast<double>(x[i] - mu) * dy[i];
  }
  const double total_dy = block_sum(sum_dy, shared);
  const double total_dy_xc = block_sum(sum_dy_xc, shared);
  if (threadIdx.x == 0) {
    dbeta[c] = static_cast<float>(total_dy);
    dgamma[c] = static_cast<float>(total_dy_xc) * (1.0f / sqrtf(variance[c] + epsilon));
  }
}

__global__ void grad_dx_kernel(const float* dy, const float* x, const float* gamma,
                               const float* mean, const float* variance, float epsilon,
                               bool training, const float* dgamma, const float* dbeta, float* dx,
                               BatchNormDims d, int64_t n) {
  const float m = static_cast<float>(d.n * d.plane);
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i / d.plane % d.c;
    const float inv_std = 1.0f / sqrtf(variance[c] + epsilon);
    float v = dy[i];
    if (training) v -= dbeta[c] / m + (x[i] - mean[c]) * dgamma[c] * inv_std / m;
    dx[i] = v * (gamma[c] * inv_std);
  }
}

__global__ void moving_average_kernel(float* variable, const float* value, float* out, float decay,
                                      int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    // Rounded like the CPU's plain expression (no fused multiply-add).
    const float v = __fadd_rn(__fmul_rn(decay, variable[i]), __fmul_rn(1.0f - decay, value[i]));
    variable[i] = v;
    out[i] = v;
  }
}

}  // namespace

void launch_batch_norm_stats(const float* x, float* mean, float* variance, const BatchNormDims& d,
                             cudaStream_t stream) {
  launch_blocks(stats_kernel, d.c, kThreads, stream, x, mean, variance, d);
}

void launch_batch_norm_apply(const float* x, const float* gamma, const float* beta,
                             const float* mean, const float* variance, float epsilon, float* y,
                             const BatchNormDims& d, cudaStream_t stream) {
  const int64_t n = d.n * d.c * d.plane;
  launch_items(apply_kernel, n, stream, x, gamma, beta, mean, variance, epsilon, y, d, n);
}

void launch_batch_norm_grad(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* variance, float epsilon, bool training, float* dx,
                            float* dgamma, float* dbeta, const BatchNormDims& d,
                            cudaStream_t stream) {
  const int64_t n = d.n * d.c * d.plane;
  if (n == 0) return;
  launch_blocks(grad_sums_kernel, d.c, kThreads, stream, dy, x, mean, variance, epsilon, dgamma,
                dbeta, d);
  launch_items(grad_dx_kernel, n, stream, dy, x, gamma, mean, variance, epsilon, training, dgamma,
               dbeta, dx, d, n);
}

void launch_assign_moving_average(float* variable, const float* value, float* out, float decay,
                                  int64_t n, cudaStream_t stream) {
  launch_items(moving_average_kernel, n, stream, variable, value, out, decay, n);
}

}  // namespace tower::cuda
