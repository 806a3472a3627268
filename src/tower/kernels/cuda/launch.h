// What nvcc compiles needs no engine header: CUDA status checks that throw a tower::Error naming
// the call, and the launchers of the element-wise kernels (elementwise.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

namespace tower::cuda {

void check(cudaError_t status, const char* call);
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
#define TOWER_CUDA_CHECK(call) ::tower::cuda::check((call), #call)

enum class Unary { relu, elu, sigmoid, tanh, scale, square, copy };
enum class Binary { add, sub, mul };
// y = f(x); `param` is Scale's factor.
void launch_unary(Unary op, const float* x, float* y, int64_t n, float param, cudaStream_t stream);
// dx = f'(y) * dy from the forward output y (relu, elu, sigmoid, tanh).
void launch_unary_grad(Unary op, const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);
// y[i] = a[i] op b[i % inner]: b has a's shape, is a scalar, or a's trailing dims.
void launch_binary(Binary op, const float* a, const float* b, float* y, int64_t n, int64_t inner,
                   cudaStream_t stream);
// y += x
void launch_accumulate(const float* x, float* y, int64_t n, cudaStream_t stream);
// x viewed as (outer, channels, inner): y = x + b[channel]; db[c] = sum of dy over outer, inner.
void launch_bias_add(const float* x, const float* b, float* y, int64_t outer, int64_t channels,
                     int64_t inner, cudaStream_t stream);
void launch_bias_add_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner,
                          cudaStream_t stream);

// NCHW images (planes = N*C of h x w) into/from a zero-padded copy of (h + top + bottom) x
// (w + left + right): cuDNN pads symmetrically, TensorFlow's SAME may put one more pixel after.
void launch_pad(const float* x, float* padded, int64_t planes, int64_t h, int64_t w, int64_t top,
                int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);
void launch_crop(const float* padded, float* x, int64_t planes, int64_t h, int64_t w, int64_t top,
                 int64_t left, int64_t padded_h, int64_t padded_w, cudaStream_t stream);

}  // namespace tower::cuda
