#include "tower/kernels/cpu/bf16.h"

#include <immintrin.h>

#include "tower/core/device.h"
#include "tower/core/dtype.h"

namespace tower::cpu {

bool cpu_converts_to_bf16() { return cpu_info().avx512_bf16; }

// 32 values at a time, the tail one by one.
[[gnu::target("avx512f,avx512bw,avx512vl,avx512bf16")]] void convert_to_bf16(const float* in,
                                                                             uint16_t* out,
                                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh pair =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(pair));
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

}  // namespace tower::cpu
