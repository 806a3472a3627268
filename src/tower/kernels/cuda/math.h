// Launchers of math.cu: element-wise arithmetic, sums and broadcast.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

// y[i] = a[i] op b[i % inner]: b has a's shape, is a scalar, or a's trailing dims.
void launch_add(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream);
void launch_sub(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream);
void launch_mul(const float* a, const float* b, float* y, int64_t n, int64_t inner,
                cudaStream_t stream);
void launch_scale(const float* x, float* y, int64_t n, float factor, cudaStream_t stream);
void launch_square(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_copy(const float* x, float* y, int64_t n, cudaStream_t stream);
// y += x
void launch_accumulate(const float* x, float* y, int64_t n, cudaStream_t stream);
// The bf16 copies that --precision bf16 convolutions and matmuls multiply (a bf16 is its 16 bits):
// rounded to the nearest, ties to even, as the CPU's conversion; and back, exactly.
void launch_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);
void launch_from_bf16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream);

constexpr int kMaxBoxDims = 8;
// A row-major box of `sizes` walked with `strides` (elements): index `linear` of the box is at
// sum_d index_d * strides[d]. rank 0 is one element at offset 0.
struct Box {
  int rank = 0;
  int64_t sizes[kMaxBoxDims] = {};
  int64_t strides[kMaxBoxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sizes[d];
    return n;
  }
};

// y[k] = scale * sum over r of f(x[kept(k) + reduced(r)]), summed in double, f = identity or
// square. Either one thread per output (reads coalesce when the kept box is innermost) or
// `chunks` blocks per output, each a fixed strided split and a fixed tree, their partial sums
// (chunks > 1: num_kept * chunks doubles of `partial`) added in order by a second kernel.
struct ReducePlan {
  Box kept, reduced;
  bool per_thread = false;
  int chunks = 1;
  bool square = false;
  double scale = 1.0;
};
void launch_reduce_sum(const float* x, float* y, double* partial, const ReducePlan& plan,
                       cudaStream_t stream);
// y[i] = x[offset of i in `in`], `in` the output's box with the input's strides (0: broadcast).
void launch_broadcast(const float* x, float* y, const Box& in, cudaStream_t stream);

}  // namespace tower::cuda
