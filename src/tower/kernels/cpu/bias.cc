// BiasAdd and BiasAddGrad: plain loops (a memory-bound broadcast and a reduction, nothing for
// oneDNN to win). Inputs are viewed as (outer, C, inner): (N, C, H*W) or (N, C, 1).
#include "tower/ops/bias.h"

#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

struct Dims {
  int64_t outer, channels, inner;
};

Dims dims_of(const Shape& x) {
  int axis = ops::bias_channel_axis(x.rank());
  int64_t inner = 1;
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x[i];
  return {x[0], x[axis], inner};
}

void bias_add(const Node& node, const KernelIO& io) {
  Dims d = dims_of(io.inputs[0].shape());
  const float* x = io.inputs[0].data<float>();
  const float* b = io.inputs[1].data<float>();
  float* y = const_cast<Tensor&>(io.outputs[0]).data<float>();
  if (d.inner == 1) {
#pragma omp parallel for
    for (int64_t n = 0; n < d.outer; ++n)
      for (int64_t c = 0; c < d.channels; ++c) y[n * d.channels + c] = x[n * d.channels + c] + b[c];
    return;
  }
#pragma omp parallel for
  for (int64_t nc = 0; nc < d.outer * d.channels; ++nc) {
    float bias = b[nc % d.channels];
    const float* xp = x + nc * d.inner;
    float* yp = y + nc * d.inner;
    for (int64_t i = 0; i < d.inner; ++i) yp[i] = xp[i] + bias;
  }
}

void bias_add_grad(const Node& node, const KernelIO& io) {
  Dims d = dims_of(io.inputs[0].shape());
  const float* dy = io.inputs[0].data<float>();
  float* db = const_cast<Tensor&>(io.outputs[0]).data<float>();
  // One channel per iteration: each sum has a fixed order, so results do not depend on threads.
#pragma omp parallel for
  for (int64_t c = 0; c < d.channels; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < d.outer; ++n) {
      const float* p = dy + (n * d.channels + c) * d.inner;
      float part = 0;
      for (int64_t i = 0; i < d.inner; ++i) part += p[i];
      sum += part;
    }
    db[c] = static_cast<float>(sum);
  }
}

KernelRegistrar bias_add_kernel{"BiasAdd", DeviceKind::cpu, simple_kernel(bias_add)};
KernelRegistrar bias_add_grad_kernel{"BiasAddGrad", DeviceKind::cpu, simple_kernel(bias_add_grad)};

}  // namespace
}  // namespace tower::cpu
