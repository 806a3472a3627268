// The softmax family on rows of k values, as the CPU kernels compute them: the row maximum is
// subtracted before exp, sums of exp and dot products are taken in double. Softmax, its
// gradient and the cross-entropy ops use one block per row (a fixed strided share per thread,
// then a fixed tree: deterministic); ArgMax and InTopK one thread per row, in the CPU kernel's
// order (their tie and NaN rules are sequential).
#include <cmath>

#include "tower/kernels/cuda/launch.cuh"
#include "tower/kernels/cuda/nn_loss.h"

namespace tower::cuda {
namespace {

constexpr int kRowThreads = 128;
// max of the row and sum(exp(x - max)) in double.
struct RowStats {
  float max;
  double sum_exp;
};
__device__ RowStats row_stats(const float* row, int64_t k) {
  __shared__ float max_shared[kRowThreads];
  __shared__ double sum_shared[kRowThreads];
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads) m = fmaxf(m, row[j]);
  m = block_max<kRowThreads>(m, max_shared);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads)
    sum += static_cast<double>(expf(row[j] - m));
  return {m, block_sum<kRowThreads>(sum, sum_shared)};
}

__global__ void softmax_kernel(const float* x, float* y, int64_t k) {
  __shared__ float max_shared[kRowThreads];
  __shared__ double sum_shared[kRowThreads];
  const float* row = x + blockIdx.x * k;
  float* out = y + blockIdx.x * k;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads) m = fmaxf(m, row[j]);
  m = block_max<kRowThreads>(m, max_shared);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads) {
    out[j] = expf(row[j] - m);
    sum += out[j];
  }
  const float inv = static_cast<float>(1.0 / block_sum<kRowThreads>(sum, sum_shared));
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads) out[j] *= inv;
}

__global__ void softmax_grad_kernel(const float* y, const float* dy, float* dx, int64_t k) {
  __shared__ double sum_shared[kRowThreads];
  const int64_t offset = blockIdx.x * k;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads)
    dot += static_cast<double>(dy[offset + j]) * y[offset + j];
  const float d = static_cast<float>(block_sum<kRowThreads>(dot, sum_shared));
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads)
    dx[offset + j] = y[offset + j] * (dy[offset + j] - d);
}

// loss = log(sum) - (x[label] - max): never forms max + log(sum).
__global__ void sparse_xent_kernel(const float* logits, const int32_t* labels, float* loss,
                                   int64_t k) {
  const float* row = logits + blockIdx.x * k;
  const RowStats st = row_stats(row, k);
  if (threadIdx.x != 0) return;
  const int32_t label = labels[blockIdx.x];
  loss[blockIdx.x] =
      label >= 0 && label < k ? static_cast<float>(log(st.sum_exp) - (row[label] - st.max)) : NAN;
}

__global__ void sparse_xent_grad_kernel(const float* logits, const int32_t* labels, const float* dy,
                                        float* dx, int64_t k) {
  const float* row = logits + blockIdx.x * k;
  float* drow = dx + blockIdx.x * k;
  const RowStats st = row_stats(row, k);
  const int32_t label = labels[blockIdx.x];
  const float g = dy[blockIdx.x];
  const bool valid = label >= 0 && label < k;
  const float scale = static_cast<float>(g / st.sum_exp);
  // The label's entry is written by the thread that owns it, so no other thread races with it.
  for (int64_t j = threadIdx.x; j < k; j += kRowThreads) {
    const float v = expf(row[j] - st.max) * scale;
    drow[j] = !valid ? NAN : j == label ? v - g : v;
  }
}

__global__ void argmax_kernel(const float* x, int32_t* out, int64_t rows, int64_t k) {
  for (int64_t i = first_index(); i < rows; i += grid_stride()) {
    const float* row = x + i * k;
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (row[j] > row[best]) best = j;
    out[i] = static_cast<int32_t>(best);
  }
}

// 1 where fewer than `top` entries are strictly larger than the label's; 0 for a bad label or a
// row with a non-finite entry.
__global__ void in_top_k_kernel(const float* x, const int32_t* labels, float* out, int64_t rows,
                                int64_t k, int64_t top) {
  for (int64_t i = first_index(); i < rows; i += grid_stride()) {
    const float* row = x + i * k;
    const int32_t label = labels[i];
    bool in = label >= 0 && label < k;
    int64_t larger = 0;
    for (int64_t j = 0; in && j < k; ++j) {
      in = isfinite(row[j]);
      larger += row[j] > row[label];
    }
    out[i] = in && larger < top ? 1.0f : 0.0f;
  }
}

}  // namespace

void launch_softmax(const float* x, float* y, int64_t rows, int64_t k, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  launch_blocks(softmax_kernel, rows, kRowThreads, stream, x, y, k);
}

void launch_softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t k,
                         cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  launch_blocks(softmax_grad_kernel, rows, kRowThreads, stream, y, dy, dx, k);
}

void launch_sparse_xent(const float* logits, const int32_t* labels, float* loss, int64_t rows,
                        int64_t k, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  launch_blocks(sparse_xent_kernel, rows, kRowThreads, stream, logits, labels, loss, k);
}

void launch_sparse_xent_grad(const float* logits, const int32_t* labels, const float* dy, float* dx,
                             int64_t rows, int64_t k, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  launch_blocks(sparse_xent_grad_kernel, rows, kRowThreads, stream, logits, labels, dy, dx, k);
}

void launch_argmax(const float* x, int32_t* out, int64_t rows, int64_t k, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  launch_items(argmax_kernel, rows, stream, x, out, rows, k);
}

void launch_in_top_k(const float* x, const int32_t* labels, float* out, int64_t rows, int64_t k,
                     int64_t top, cudaStream_t stream) {
  launch_items(in_top_k_kernel, rows, stream, x, labels, out, rows, k, top);
}

}  // namespace tower::cuda
