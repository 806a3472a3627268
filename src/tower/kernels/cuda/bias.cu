// BiasAdd, one thread per element, and BiasAddGrad, a per-channel tree reduction in double with a
// fixed shape, so that its result does not depend on scheduling.
#include "tower/kernels/cuda/bias.h"
#include "tower/kernels/cuda/launch.cuh"

namespace tower::cuda {
namespace {

__global__ void bias_add_kernel(const float* x, const float* b, float* y, int64_t n,
                                int64_t channels, int64_t inner) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = x[i] + b[(i / inner) % channels];
}

// One block per channel; thread t sums a fixed strided subset, then a fixed tree.
__global__ void bias_add_grad_kernel(const float* dy, float* db, int64_t outer, int64_t channels,
                                     int64_t inner) {
  __shared__ double partial[kThreads];
  const int64_t c = blockIdx.x;
  double sum = 0;
  for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
    const int64_t o = k / inner, i = k % inner;
    sum += dy[(o * channels + c) * inner + i];
  }
  sum = block_sum(sum, partial);
  if (threadIdx.x == 0) db[c] = static_cast<float>(sum);
}

}  // namespace

void launch_bias_add(const float* x, const float* b, float* y, int64_t outer, int64_t channels,
                     int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * channels * inner;
  launch_items(bias_add_kernel, n, stream, x, b, y, n, channels, inner);
}

void launch_bias_add_grad(const float* dy, float* db, int64_t outer, int64_t channels,
                          int64_t inner, cudaStream_t stream) {
  launch_blocks(bias_add_grad_kernel, channels, kThreads, stream, dy, db, outer, channels, inner);
}

}  // namespace tower::cuda
