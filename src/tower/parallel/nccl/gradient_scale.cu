// A grid-stride loop, one thread per element, in blocks of 256 (as the Scale kernel).
#include "tower/parallel/nccl/gradient_scale.h"

namespace tower::nccl {
namespace {

constexpr int kThreads = 256;

__global__ void scale_kernel(const float* x, float* y, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = factor * x[i];
}

}  // namespace

cudaError_t scale_gradient(const float* x, float* y, int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  scale_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0, stream>>>(
      x, y, n, factor);
  return cudaGetLastError();
}

}  // namespace tower::nccl
