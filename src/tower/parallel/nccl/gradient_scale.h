// The one kernel the NCCL reducer launches itself (gradient_scale.cu): the parallel layer may not
// use the kernels' headers (STYLE.md §2), and this needs nothing from them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::nccl {

// y = factor * x, n floats, enqueued on `stream`; returns the launch's status.
cudaError_t scale_gradient(const float* x, float* y, int64_t n, float factor, cudaStream_t stream);

}  // namespace tower::nccl
