// Element-wise arithmetic (Add/Sub/Mul with a broadcast operand, Scale, Square, AddN's copy and
// accumulate, bf16 copies), one thread per element; sums (ReduceSum, SumToShape, L2Loss) and
// BroadcastTo. A sum's result does not depend on scheduling: every output is summed in double
// either by one thread in index order, or by a fixed number of blocks per output whose threads take
// a fixed strided share and combine it in a fixed tree, the blocks' partial sums then added in
// order. Which of the two is chosen depends only on the shapes (math.cc), so one program always
// sums the same way.
#include <cuda_bf16.h>

#include "tower/kernels/cuda/launch.cuh"
#include "tower/kernels/cuda/math.h"

namespace tower::cuda {
namespace {

// y[i] = f(a[i], b[i % inner])
template <typename F>
__global__ void broadcast_zip_kernel(const float* a, const float* b, float* y, int64_t n,
                                     int64_t inner, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(a[i], b[i % inner]);
}
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct Scale {
  float factor;
  __device__ float operator()(float x) const { return factor * x; }
};
struct Square {
  __device__ float operator()(float x) const { return x * x; }
};
struct Copy {
  __device__ float operator()(float x) const { return x; }
};

__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
__global__ void from_bf16_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}

__global__ void accumulate_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] += x[i];
}

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
__global__ void reduce_per_thread_kernel(const float* x, float* y, Box kept, Box reduced,
                                         int64_t num_kept, int64_t num_reduced, bool square,
                                         double scale) {
  for (int64_t k = first_index(); k < num_kept; k += grid_stride()) {
    const float* base = x + box_offset(k, kept);
    double sum = 0;
    for (int64_t r = 0; r < num_reduced; ++r) sum += term(base[box_offset(r, reduced)], square);
    y[k] = static_cast<float>(sum * scale);
  }
}

// Block b sums chunk (b % chunks) of output (b / chunks): thread t takes elements t, t + kThreads,
// ... of the chunk, then a fixed tree. With one chunk it writes the output, else a partial sum.
__global__ void reduce_block_kernel(const float* x, float* y, double* partial, Box kept,
                                    Box reduced, int64_t num_reduced, int chunks, bool square,
                                    double scale) {
  __shared__ double sums[kThreads];
  const int64_t k = blockIdx.x / chunks;
  const int chunk = static_cast<int>(blockIdx.x % chunks);
  const int64_t per_chunk = (num_reduced + chunks - 1) / chunks;
  const int64_t begin = chunk * per_chunk;
  const int64_t end = begin + per_chunk < num_reduced ? begin + per_chunk : num_reduced;
  const float* base = x + box_offset(k, kept);
  double sum = 0;
  for (int64_t r = begin + threadIdx.x; r < end; r += kThreads)
    sum += term(base[box_offset(r, reduced)], square);
  sum = block_sum(sum, sums);
  if (threadIdx.x != 0) return;
  if (chunks == 1)
    y[k] = static_cast<float>(sum * scale);
  else
    partial[blockIdx.x] = sum;
}

// Adds each output's partial sums in chunk order.
__global__ void reduce_partials_kernel(const double* partial, float* y, int64_t num_kept,
                                       int chunks, double scale) {
  for (int64_t k = first_index(); k < num_kept; k += grid_stride()) {
    double sum = 0;
    for (int c = 0; c < chunks; ++c) sum += partial[k * chunks + c];
    y[k] = static_cast<float>(sum * scale);
  }
}

__global__ void broadcast_kernel(const float* x, float* y, Box in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = x[box_offset(i, in)];
}

}  // namespace

void launch_add(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream) {
  launch_items(broadcast_zip_kernel<Add>, n, stream, a, b, y, n, inner, Add{});
}
void launch_sub(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream) {
  launch_items(broadcast_zip_kernel<Sub>, n, stream, a, b, y, n, inner, Sub{});
}
void launch_mul(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream) {
  launch_items(broadcast_zip_kernel<Mul>, n, stream, a, b, y, n, inner, Mul{});
}
void launch_scale(const float* x, float* y, int64_t n, float factor, cudaStream_t stream) {
  launch_items(map_kernel<Scale>, n, stream, x, y, n, Scale{factor});
}
void launch_square(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Square>, n, stream, x, y, n, Square{});
}
void launch_copy(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Copy>, n, stream, x, y, n, Copy{});
}
void launch_accumulate(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(accumulate_kernel, n, stream, x, y, n);
}
void launch_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  launch_items(to_bf16_kernel, n, stream, x, y, n);
}
void launch_from_bf16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(from_bf16_kernel, n, stream, x, y, n);
}

void launch_reduce_sum(const float* x, float* y, double* partial, const ReducePlan& plan,
                       cudaStream_t stream) {
  const int64_t num_kept = plan.kept.numel(), num_reduced = plan.reduced.numel();
  if (num_kept == 0) return;
  if (plan.per_thread) {
    launch_items(reduce_per_thread_kernel, num_kept, stream, x, y, plan.kept, plan.reduced,
                 num_kept, num_reduced, plan.square, plan.scale);
    return;
  }
  launch_blocks(reduce_block_kernel, num_kept * plan.chunks, kThreads, stream, x, y, partial,
                plan.kept, plan.reduced, num_reduced, plan.chunks, plan.square, plan.scale);
  if (plan.chunks == 1) return;
  launch_items(reduce_partials_kernel, num_kept, stream, partial, y, num_kept, plan.chunks,
               plan.scale);
}

void launch_broadcast(const float* x, float* y, const Box& in, cudaStream_t stream) {
  const int64_t n = in.numel();
  launch_items(broadcast_kernel, n, stream, x, y, in, n);
}

}  // namespace tower::cuda
