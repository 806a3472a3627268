// Shared by the CUDA kernels: the tower's stream and device, and (launch.h) status checks and the
// element-wise launchers.
#pragma once

#include "tower/kernels/cuda/launch.h"
#include "tower/kernels/kernel.h"

namespace tower::cuda {

inline cudaStream_t stream_of(const KernelContext& context) {
  return static_cast<cudaStream_t>(context.stream);
}
// Makes `device` current on the calling thread (kernels are built and run on tower threads).
void use_device(const Device& device);

}  // namespace tower::cuda
