// Dropout and DropoutGrad: the CPU kernel's mask, bit for bit. Element i keeps its value when the
// top 24 bits of word i % 4 of Philox4x32-10 block i / 4 (key = seed, counter = (i / 4, stream))
// are below the threshold. philox4x32 below is a device copy of the one in
// src/tower/core/philox.cc (host only) and must stay identical to it; the GPU-vs-CPU test of
// Dropout checks that it does.
#include "tower/kernels/cuda/dropout.h"
#include "tower/kernels/cuda/launch.cuh"

namespace tower::cuda {
namespace {

struct Words {
  uint32_t w[4];
};

// Mirrors tower::philox4x32 (core/philox.cc): 10 rounds, the same multipliers and Weyl constants,
// the same word order.
__device__ __forceinline__ Words philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                            uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// One thread per Philox block (4 elements).
__global__ void dropout_kernel(const float* x, float* y, int64_t n, uint64_t seed,
                               uint64_t stream_id, uint32_t threshold, float inv_keep) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = first_index(); b < blocks; b += grid_stride()) {
    const uint64_t counter = static_cast<uint64_t>(b);
    const Words words =
        philox4x32(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                   static_cast<uint32_t>(stream_id), static_cast<uint32_t>(stream_id >> 32),
                   static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    for (int l = 0; l < 4; ++l) {
      const int64_t i = b * 4 + l;
      if (i < n) y[i] = (words.w[l] >> 8) < threshold ? x[i] * inv_keep : 0.0f;
    }
  }
}

}  // namespace

void launch_dropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t stream_id,
                    uint32_t threshold, float inv_keep, cudaStream_t stream) {
  launch_items(dropout_kernel, (n + 3) / 4, stream, x, y, n, seed, stream_id, threshold, inv_keep);
}

}  // namespace tower::cuda
