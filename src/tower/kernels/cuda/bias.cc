// CUDA kernels of BiasAdd and BiasAddGrad (bias.cu), on the tower's stream.
#include "tower/kernels/cuda/bias.h"

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/bias.h"

namespace tower::cuda {
namespace {

// x viewed as (N, C, inner), as the CPU kernel sees it.
struct BiasDims {
  int64_t outer = 1, channels = 1, inner = 1;
};
BiasDims bias_dims(const Shape& x) {
  const int axis = ops::bias_channel_axis(x.rank());
  BiasDims d{x[0], x[axis], 1};
  for (int i = axis + 1; i < x.rank(); ++i) d.inner *= x[i];
  return d;
}

KernelRegistrar bias_add{"BiasAdd", DeviceKind::cuda,
                         stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                           const BiasDims d = bias_dims(io.inputs[0].shape());
                           launch_bias_add(io.inputs[0].data<float>(), io.inputs[1].data<float>(),
                                           output_of(io), d.outer, d.channels, d.inner, s);
                         })};

KernelRegistrar bias_add_grad{"BiasAddGrad", DeviceKind::cuda,
                              stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                                const BiasDims d = bias_dims(io.inputs[0].shape());
                                launch_bias_add_grad(io.inputs[0].data<float>(), output_of(io),
                                                     d.outer, d.channels, d.inner, s);
                              })};

}  // namespace
}  // namespace tower::cuda
