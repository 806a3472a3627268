// Shared by the .cu files (nvcc only): grid-stride loops, the launch boilerplate, element-wise
// maps and block reductions in a fixed tree (the same bits every run, the determinism contract of
// the CPU kernels). Launchers enqueue on the tower's stream and allocate nothing.
#pragma once

#include <cstdint>

#include "tower/kernels/cuda/cuda_check.h"

namespace tower::cuda {

constexpr int kThreads = 256;  // threads per block of the grid-stride kernels

// A grid-stride loop: for (int64_t i = first_index(); i < n; i += grid_stride()).
__device__ __forceinline__ int64_t first_index() {
  return blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// Enqueues `kernel`, a grid-stride loop over n items, in blocks of kThreads (nothing when n is 0),
// and checks the launch.
template <typename... Params, typename... Args>
void launch_items(void (*kernel)(Params...), int64_t n, cudaStream_t stream, Args... args) {
  if (n == 0) return;
  kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(args...);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

// Enqueues `blocks` blocks of `threads` (one block per channel, row, output...).
template <typename... Params, typename... Args>
void launch_blocks(void (*kernel)(Params...), int64_t blocks, int threads, cudaStream_t stream,
                   Args... args) {
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(args...);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

// y[i] = f(x[i]).
template <typename F>
__global__ void map_kernel(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(x[i]);
}
// y[i] = f(a[i], b[i]).
template <typename F>
__global__ void zip_kernel(const float* a, const float* b, float* y, int64_t n, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(a[i], b[i]);
}

// Combines v over the block's Threads threads (a power of two) with `op` in a fixed tree; every
// thread gets the result. `shared` holds Threads values.
template <int Threads, typename T, typename Op>
__device__ T block_reduce(T v, T* shared, Op op) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int width = Threads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();
  return total;
}

struct Plus {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <int Threads = kThreads>
__device__ double block_sum(double v, double* shared) {
  return block_reduce<Threads>(v, shared, Plus{});
}
template <int Threads = kThreads>
__device__ float block_max(float v, float* shared) {
  return block_reduce<Threads>(v, shared, Max{});
}

}  // namespace tower::cuda
