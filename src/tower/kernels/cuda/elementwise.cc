// CUDA kernels of the element-wise ops (activations and their gradients, Add/Sub/Mul with a
// broadcast operand, Scale, Square, AddN, Reshape, BiasAdd and BiasAddGrad): each launches one of
// the kernels of elementwise.cu on the tower's stream.
#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/bias.h"
#include "tower/ops/math.h"

namespace tower::cuda {
namespace {

const float* in(const KernelIO& io, size_t i) { return io.inputs[i].data<float>(); }
float* out(const KernelIO& io) { return const_cast<Tensor&>(io.outputs[0]).data<float>(); }

KernelFactory unary(Unary op) {
  return stream_kernel([op](const Node& node, const KernelIO& io, cudaStream_t s) {
    const float param = op == Unary::scale ? node.attr<ops::ScaleAttrs>().factor : 0.0f;
    launch_unary(op, in(io, 0), out(io), io.outputs[0].numel(), param, s);
  });
}

KernelFactory unary_grad(Unary op) {  // inputs (dy, y)
  return stream_kernel([op](const Node&, const KernelIO& io, cudaStream_t s) {
    launch_unary_grad(op, in(io, 0), in(io, 1), out(io), io.outputs[0].numel(), s);
  });
}

KernelFactory binary(Binary op) {
  return stream_kernel([op](const Node&, const KernelIO& io, cudaStream_t s) {
    launch_binary(op, in(io, 0), in(io, 1), out(io), io.inputs[0].numel(), io.inputs[1].numel(), s);
  });
}

// x viewed as (N, C, inner), as the CPU kernel sees it.
void bias_dims(const Shape& x, int64_t& outer, int64_t& channels, int64_t& inner) {
  const int axis = ops::bias_channel_axis(x.rank());
  outer = x[0];
  channels = x[axis];
  inner = 1;
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x[i];
}

KernelRegistrar relu{"Relu", DeviceKind::cuda, unary(Unary::relu)};
KernelRegistrar elu{"Elu", DeviceKind::cuda, unary(Unary::elu)};
KernelRegistrar sigmoid{"Sigmoid", DeviceKind::cuda, unary(Unary::sigmoid)};
KernelRegistrar tanh_kernel{"Tanh", DeviceKind::cuda, unary(Unary::tanh)};
KernelRegistrar scale{"Scale", DeviceKind::cuda, unary(Unary::scale)};
KernelRegistrar square{"Square", DeviceKind::cuda, unary(Unary::square)};
KernelRegistrar relu_grad{"ReluGrad", DeviceKind::cuda, unary_grad(Unary::relu)};
KernelRegistrar elu_grad{"EluGrad", DeviceKind::cuda, unary_grad(Unary::elu)};
KernelRegistrar sigmoid_grad{"SigmoidGrad", DeviceKind::cuda, unary_grad(Unary::sigmoid)};
KernelRegistrar tanh_grad{"TanhGrad", DeviceKind::cuda, unary_grad(Unary::tanh)};
KernelRegistrar add{"Add", DeviceKind::cuda, binary(Binary::add)};
KernelRegistrar sub{"Sub", DeviceKind::cuda, binary(Binary::sub)};
KernelRegistrar mul{"Mul", DeviceKind::cuda, binary(Binary::mul)};

// Summed in input order, like the CPU kernel.
KernelRegistrar add_n{"AddN", DeviceKind::cuda, stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
  const int64_t n = io.outputs[0].numel();
  launch_unary(Unary::copy, in(io, 0), out(io), n, 0.0f, s);
  for (size_t k = 1; k < io.inputs.size(); ++k) launch_accumulate(in(io, k), out(io), n, s);
})};

KernelRegistrar reshape{"Reshape", DeviceKind::cuda, stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
  const void* x = io.inputs[0].raw_data();
  void* y = const_cast<Tensor&>(io.outputs[0]).raw_data();
  if (x != y) TOWER_CUDA_CHECK(cudaMemcpyAsync(y, x, io.outputs[0].nbytes(), cudaMemcpyDeviceToDevice, s));
})};

KernelRegistrar bias_add{"BiasAdd", DeviceKind::cuda, stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
  int64_t outer, channels, inner;
  bias_dims(io.inputs[0].shape(), outer, channels, inner);
  launch_bias_add(in(io, 0), in(io, 1), out(io), outer, channels, inner, s);
})};

KernelRegistrar bias_add_grad{"BiasAddGrad", DeviceKind::cuda,
                              stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                                int64_t outer, channels, inner;
                                bias_dims(io.inputs[0].shape(), outer, channels, inner);
                                launch_bias_add_grad(in(io, 0), out(io), outer, channels, inner, s);
                              })};

}  // namespace
}  // namespace tower::cuda
