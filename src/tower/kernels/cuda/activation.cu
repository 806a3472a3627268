// Activations and their gradients: one element-wise map each (launch.cuh), one thread per element.
#include "tower/kernels/cuda/activation.h"
#include "tower/kernels/cuda/launch.cuh"

namespace tower::cuda {
namespace {

struct Relu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct Relu6 {
  __device__ float operator()(float x) const { return fminf(fmaxf(x, 0.0f), 6.0f); }
};
struct Elu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : expm1f(x); }
};
struct Sigmoid {
  __device__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
// (dy, y) -> dx
struct ReluGrad {
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct Relu6Grad {
  __device__ float operator()(float dy, float y) const { return y > 0.0f && y < 6.0f ? dy : 0.0f; }
};
struct EluGrad {
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : dy * (y + 1.0f); }
};
struct SigmoidGrad {
  __device__ float operator()(float dy, float y) const { return dy * y * (1.0f - y); }
};
struct TanhGrad {
  __device__ float operator()(float dy, float y) const { return dy * (1.0f - y * y); }
};

}  // namespace

void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Relu>, n, stream, x, y, n, Relu{});
}
void launch_relu6(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Relu6>, n, stream, x, y, n, Relu6{});
}
void launch_elu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Elu>, n, stream, x, y, n, Elu{});
}
void launch_sigmoid(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Sigmoid>, n, stream, x, y, n, Sigmoid{});
}
void launch_tanh(const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_items(map_kernel<Tanh>, n, stream, x, y, n, Tanh{});
}
void launch_relu_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream) {
  launch_items(zip_kernel<ReluGrad>, n, stream, dy, y, dx, n, ReluGrad{});
}
void launch_relu6_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream) {
  launch_items(zip_kernel<Relu6Grad>, n, stream, dy, y, dx, n, Relu6Grad{});
}
void launch_elu_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream) {
  launch_items(zip_kernel<EluGrad>, n, stream, dy, y, dx, n, EluGrad{});
}
void launch_sigmoid_grad(const float* dy, const float* y, float* dx, int64_t n,
                         cudaStream_t stream) {
  launch_items(zip_kernel<SigmoidGrad>, n, stream, dy, y, dx, n, SigmoidGrad{});
}
void launch_tanh_grad(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t stream) {
  launch_items(zip_kernel<TanhGrad>, n, stream, dy, y, dx, n, TanhGrad{});
}

}  // namespace tower::cuda
