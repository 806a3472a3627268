// CUDA kernels of FusedBatchNorm, FusedBatchNormGrad and AssignMovingAverage (batch_norm.cu), with
// the CPU kernel's formulas and outputs: training normalizes with the batch statistics and outputs
// them (variance biased); inference normalizes with the moving ones and outputs those.
#include "tower/kernels/cuda/batch_norm.h"

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/batch_norm.h"

namespace tower::cuda {
namespace {

// x (N, C) or (N, C, H, W) as (n, c, plane).
BatchNormDims dims_of(const Shape& x) {
  BatchNormDims d;
  d.n = x[0];
  d.c = x[1];
  d.plane = x.rank() == 4 ? x[2] * x[3] : 1;
  return d;
}

bool training(const Node& node) {
  return node.attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::training;
}

// (x, gamma, beta, moving_mean, moving_var) -> (y, mean, variance)
KernelRegistrar batch_norm{
    "FusedBatchNorm", DeviceKind::cuda,
    stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
      const BatchNormDims d = dims_of(io.inputs[0].shape());
      float* mean = output_of(io, 1);
      float* variance = output_of(io, 2);
      if (training(node)) {
        launch_batch_norm_stats(io.inputs[0].data<float>(), mean, variance, d, s);
      } else {
        TOWER_CUDA_CHECK(cudaMemcpyAsync(mean, io.inputs[3].raw_data(), io.inputs[3].nbytes(),
                                         cudaMemcpyDeviceToDevice, s));
        TOWER_CUDA_CHECK(cudaMemcpyAsync(variance, io.inputs[4].raw_data(), io.inputs[4].nbytes(),
                                         cudaMemcpyDeviceToDevice, s));
      }
      launch_batch_norm_apply(io.inputs[0].data<float>(), io.inputs[1].data<float>(),
                              io.inputs[2].data<float>(), mean, variance,
                              node.attr<ops::BatchNormAttrs>().epsilon, output_of(io), d, s);
    })};

// (dy, x, gamma, beta, mean, variance) -> (dx, dgamma, dbeta)
KernelRegistrar batch_norm_grad{
    "FusedBatchNormGrad", DeviceKind::cuda,
    stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
      launch_batch_norm_grad(io.inputs[0].data<float>(), io.inputs[1].data<float>(),
                             io.inputs[2].data<float>(), io.inputs[4].data<float>(),
                             io.inputs[5].data<float>(), node.attr<ops::BatchNormAttrs>().epsilon,
                             training(node), output_of(io, 0), output_of(io, 1), output_of(io, 2),
                             dims_of(io.inputs[1].shape()), s);
    })};

// Input 0 is a view of the variable's storage: the update lands in the variable itself.
KernelRegistrar assign_moving_average{
    "AssignMovingAverage", DeviceKind::cuda,
    stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
      launch_assign_moving_average(
          const_cast<Tensor&>(io.inputs[0]).data<float>(), io.inputs[1].data<float>(),
          output_of(io), node.attr<ops::AssignMovingAverageAttrs>().decay, io.inputs[0].numel(), s);
    })};

}  // namespace
}  // namespace tower::cuda
