// f32 -> bf16 conversion for CPU kernels that write bf16 (round to nearest even, as oneDNN and
// TensorFlow), with AVX512-BF16's instruction: only where the CPU has it (bf16 precision needs it).
#pragma once

#include <cstdint>

namespace tower::cpu {

bool cpu_converts_to_bf16();  // AVX512-BF16 present
// n values, on the calling thread.
void convert_to_bf16(const float* in, uint16_t* out, int64_t n);

}  // namespace tower::cpu
