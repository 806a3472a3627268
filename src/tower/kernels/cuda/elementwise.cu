// Element-wise CUDA kernels: grid-stride loops, one thread per element. The bias gradient is a
// per-channel tree reduction in double with a fixed shape, so its result does not depend on
// scheduling (the determinism contract of the CPU kernels).
#include "tower/kernels/cuda/launch.h"

namespace tower::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__device__ float apply_unary(Unary op, float x, float param) {
  switch (op) {
    case Unary::relu: return x > 0.0f ? x : 0.0f;
    case Unary::elu: return x > 0.0f ? x : expm1f(x);
    case Unary::sigmoid: return 1.0f / (1.0f + expf(-x));
    case Unary::tanh: return tanhf(x);
    case Unary::scale: return param * x;
    case Unary::square: return x * x;
    default: return x;
  }
}

__device__ float apply_unary_grad(Unary op, float dy, float y) {
  switch (op) {
    case Unary::relu: return y > 0.0f ? dy : 0.0f;
    case Unary::elu: return y > 0.0f ? dy : dy * (y + 1.0f);
    case Unary::sigmoid: return dy * y * (1.0f - y);
    case Unary::tanh: return dy * (1.0f - y * y);
    default: return dy;
  }
}

__global__ void unary_kernel(Unary op, const float* x, float* y, int64_t n, float param) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = apply_unary(op, x[i], param);
}

__global__ void unary_grad_kernel(Unary op, const float* dy, const float* y, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = apply_unary_grad(op, dy[i], y[i]);
}

__global__ void binary_kernel(Binary op, const float* a, const float* b, float* y, int64_t n, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float bv = b[i % inner];
    y[i] = op == Binary::add ? a[i] + bv : op == Binary::sub ? a[i] - bv : a[i] * bv;
  }
}

__global__ void accumulate_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void bias_add_kernel(const float* x, const float* b, float* y, int64_t n, int64_t channels,
                                int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] + b[(i / inner) % channels];
}

// One block per channel; thread t sums a fixed strided subset, then a fixed tree.
__global__ void bias_add_grad_kernel(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner) {
  __shared__ double partial[kThreads];
  const int64_t c = blockIdx.x;
  double sum = 0;
  for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
    const int64_t o = k / inner, i = k % inner;
    sum += dy[(o * channels + c) * inner + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = static_cast<float>(partial[0]);
}

__global__ void pad_kernel(const float* x, float* padded, int64_t n, int64_t h, int64_t w, int64_t top,
                           int64_t left, int64_t ph, int64_t pw) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (ph * pw), r = i / pw % ph - top, c = i % pw - left;
    padded[i] = r >= 0 && r < h && c >= 0 && c < w ? x[(plane * h + r) * w + c] : 0.0f;
  }
}

__global__ void crop_kernel(const float* padded, float* x, int64_t n, int64_t h, int64_t w, int64_t top,
                            int64_t left, int64_t ph, int64_t pw) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (h * w), r = i / w % h + top, c = i % w + left;
    x[i] = padded[(plane * ph + r) * pw + c];
  }
}

}  // namespace

void launch_pad(const float* x, float* padded, int64_t planes, int64_t h, int64_t w, int64_t top,
                int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream) {
  const int64_t n = planes * padded_h * padded_w;
  if (n == 0) return;
  pad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, padded, n, h, w, top, left, padded_h, padded_w);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_crop(const float* padded, float* x, int64_t planes, int64_t h, int64_t w, int64_t top,
                 int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream) {
  const int64_t n = planes * h * w;
  if (n == 0) return;
  crop_kernel<<<blocks_for(n), kThreads, 0, stream>>>(padded, x, n, h, w, top, left, padded_h, padded_w);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_unary(Unary op, const float* x, float* y, int64_t n, float param, cudaStream_t stream) {
  if (n == 0) return;
  unary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, x, y, n, param);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_unary_grad(Unary op, const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  unary_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, dy, y, dx, n);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_binary(Binary op, const float* a, const float* b, float* y, int64_t n, int64_t inner,
                   cudaStream_t stream) {
  if (n == 0) return;
  binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, a, b, y, n, inner);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_accumulate(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_bias_add(const float* x, const float* b, float* y, int64_t outer, int64_t channels,
                     int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * channels * inner;
  if (n == 0) return;
  bias_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, b, y, n, channels, inner);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_bias_add_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner,
                          cudaStream_t stream) {
  if (channels == 0) return;
  bias_add_grad_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(dy, db, outer, channels, inner);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tower::cuda
