// Launchers of nn_loss.cu: row-wise softmax family (rows of k), one block per row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

void launch_softmax(const float* x, float* y, int64_t rows, int64_t k, cudaStream_t stream);
void launch_softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t k,
                         cudaStream_t stream);
// A label outside [0, k) gives a NaN loss (resp. a NaN gradient row), as TensorFlow's GPU kernel.
void launch_sparse_xent(const float* logits, const int32_t* labels, float* loss, int64_t rows,
                        int64_t k, cudaStream_t stream);
void launch_sparse_xent_grad(const float* logits, const int32_t* labels, const float* dy, float* dx,
                             int64_t rows, int64_t k, cudaStream_t stream);
void launch_argmax(const float* x, int32_t* out, int64_t rows, int64_t k, cudaStream_t stream);
void launch_in_top_k(const float* x, const int32_t* labels, float* out, int64_t rows, int64_t k,
                     int64_t top, cudaStream_t stream);

}  // namespace tower::cuda
