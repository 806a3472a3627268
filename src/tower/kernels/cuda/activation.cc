// CUDA kernels of the activations and their gradients (activation.cu), on the tower's stream.
#include "tower/kernels/cuda/activation.h"

#include "tower/kernels/cuda/cuda_util.h"

namespace tower::cuda {
namespace {

using Forward = void (*)(const float* x, float* y, int64_t n, cudaStream_t stream);
using Backward = void (*)(const float* dy, const float* y, float* dx, int64_t n,
                          cudaStream_t stream);

KernelFactory forward(Forward launch) {
  return stream_kernel([launch](const Node&, const KernelIO& io, cudaStream_t s) {
    launch(io.inputs[0].data<float>(), output_of(io), io.outputs[0].numel(), s);
  });
}

KernelFactory backward(Backward launch) {  // inputs (dy, y)
  return stream_kernel([launch](const Node&, const KernelIO& io, cudaStream_t s) {
    launch(io.inputs[0].data<float>(), io.inputs[1].data<float>(), output_of(io),
           io.outputs[0].numel(), s);
  });
}

KernelRegistrar relu{"Relu", DeviceKind::cuda, forward(launch_relu)};
KernelRegistrar relu6{"Relu6", DeviceKind::cuda, forward(launch_relu6)};
KernelRegistrar elu{"Elu", DeviceKind::cuda, forward(launch_elu)};
KernelRegistrar sigmoid{"Sigmoid", DeviceKind::cuda, forward(launch_sigmoid)};
KernelRegistrar tanh_kernel{"Tanh", DeviceKind::cuda, forward(launch_tanh)};
KernelRegistrar relu_grad{"ReluGrad", DeviceKind::cuda, backward(launch_relu_grad)};
KernelRegistrar relu6_grad{"Relu6Grad", DeviceKind::cuda, backward(launch_relu6_grad)};
KernelRegistrar elu_grad{"EluGrad", DeviceKind::cuda, backward(launch_elu_grad)};
KernelRegistrar sigmoid_grad{"SigmoidGrad", DeviceKind::cuda, backward(launch_sigmoid_grad)};
KernelRegistrar tanh_grad{"TanhGrad", DeviceKind::cuda, backward(launch_tanh_grad)};

}  // namespace
}  // namespace tower::cuda
