// Launchers of activation.cu: y = f(x), and dx = f'(y) * dy from the forward output y.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_relu6(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_elu(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_sigmoid(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_tanh(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_relu_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);
void launch_relu6_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);
void launch_elu_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);
void launch_sigmoid_grad(const float* dy, const float* y, float* dx, int64_t n,
                         cudaStream_t stream);
void launch_tanh_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream);

}  // namespace tower::cuda
