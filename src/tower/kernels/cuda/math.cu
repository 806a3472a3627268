// Sums (ReduceSum, SumToShape, L2Loss) and BroadcastTo. A sum's result does not depend on
// scheduling: every output is summed in double either by one thread in index order, or by a
// fixed number of blocks per output whose threads take a fixed strided share and combine it in a
// fixed tree, the blocks' partial sums then added in order. Which of the two is chosen depends
// only on the shapes (reduce.cc), so one program always sums the same way.
#include "tower/kernels/cuda/launch.h"

namespace tower::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t box_offset(int64_t linear, const Box& box) {
  int64_t offset = 0;
  for (int d = box.rank - 1; d >= 0; --d) {
    offset += (linear % box.sizes[d]) * box.strides[d];
    linear /= box.sizes[d];
  }
  return offset;
}

__device__ __forceinline__ double term(float v, bool square) {
  const double d = v;
  return square ? d * d : d;
}

// One thread per output, the reduced elements in index order.
__global__ void reduce_per_thread_kernel(const float* x, float* y, Box kept, Box reduced, int64_t num_kept,
                                         int64_t num_reduced, bool square, double scale) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < num_kept; k += int64_t(gridDim.x) * blockDim.x) {
    const float* base = x + box_offset(k, kept);
    double sum = 0;
    for (int64_t r = 0; r < num_reduced; ++r) sum += term(base[box_offset(r, reduced)], square);
    y[k] = static_cast<float>(sum * scale);
  }
}

// Block b sums chunk (b % chunks) of output (b / chunks): thread t takes elements t, t + kThreads,
// ... of the chunk, then a fixed tree. With one chunk it writes the output, else a partial sum.
__global__ void reduce_block_kernel(const float* x, float* y, double* partial, Box kept, Box reduced,
                                    int64_t num_reduced, int chunks, bool square, double scale) {
  __shared__ double sums[kThreads];
  const int64_t k = blockIdx.x / chunks;
  const int chunk = static_cast<int>(blockIdx.x % chunks);
  const int64_t per_chunk = (num_reduced + chunks - 1) / chunks;
  const int64_t begin = chunk * per_chunk;
  const int64_t end = begin + per_chunk < num_reduced ? begin + per_chunk : num_reduced;
  const float* base = x + box_offset(k, kept);
  double sum = 0;
  for (int64_t r = begin + threadIdx.x; r < end; r += kThreads) sum += term(base[box_offset(r, reduced)], square);
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) sums[threadIdx.x] += sums[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (chunks == 1)
    y[k] = static_cast<float>(sums[0] * scale);
  else
    partial[blockIdx.x] = sums[0];
}

// Adds each output's partial sums in chunk order.
__global__ void reduce_partials_kernel(const double* partial, float* y, int64_t num_kept, int chunks, double scale) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < num_kept; k += int64_t(gridDim.x) * blockDim.x) {
    double sum = 0;
    for (int c = 0; c < chunks; ++c) sum += partial[k * chunks + c];
    y[k] = static_cast<float>(sum * scale);
  }
}

__global__ void broadcast_kernel(const float* x, float* y, Box in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[box_offset(i, in)];
}

}  // namespace

void launch_reduce_sum(const float* x, float* y, double* partial, const ReducePlan& plan, cudaStream_t stream) {
  const int64_t num_kept = plan.kept.numel(), num_reduced = plan.reduced.numel();
  if (num_kept == 0) return;
  if (plan.per_thread) {
    reduce_per_thread_kernel<<<grid_blocks(num_kept, kThreads), kThreads, 0, stream>>>(
        x, y, plan.kept, plan.reduced, num_kept, num_reduced, plan.square, plan.scale);
    TOWER_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t blocks = num_kept * plan.chunks;
  reduce_block_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, y, partial, plan.kept, plan.reduced, num_reduced, plan.chunks, plan.square, plan.scale);
  TOWER_CUDA_CHECK(cudaGetLastError());
  if (plan.chunks == 1) return;
  reduce_partials_kernel<<<grid_blocks(num_kept, kThreads), kThreads, 0, stream>>>(partial, y, num_kept,
                                                                                   plan.chunks, plan.scale);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

void launch_broadcast(const float* x, float* y, const Box& in, cudaStream_t stream) {
  const int64_t n = in.numel();
  if (n == 0) return;
  broadcast_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, in, n);
  TOWER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tower::cuda
