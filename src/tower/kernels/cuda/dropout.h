// Launchers of dropout.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tower::cuda {

// y[i] = x[i] * inv_keep where the top 24 bits of word i of Philox(seed, stream) are below
// `threshold`, else 0 (the CPU kernel's mask, bit for bit).
void launch_dropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t stream_id,
                    uint32_t threshold, float inv_keep, cudaStream_t stream);

}  // namespace tower::cuda
