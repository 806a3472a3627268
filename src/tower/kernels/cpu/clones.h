// Hand-written CPU loops compiled several times, for AVX-512, AVX2 (with FMA, which every AVX2 CPU
// has) and the baseline (the build itself targets the baseline x86-64), the one to run picked by
// cpu_isa(): the CPU's own level, or the smaller one that the cap asks for (set_max_cpu_isa,
// ONEDNN_MAX_CPU_ISA), as oneDNN's kernels are. Write the loop as a [[gnu::always_inline]] function
// NAME_body (and the templates it calls likewise, so that they are compiled into each variant),
// then TOWER_CPU_VARIANTS(NAME, (params), (args)) defines the variants and `void NAME(params)`,
// which calls the one of the process's level.
#pragma once

#include <cstdint>
#include <cstring>

#include "tower/core/device.h"

#define TOWER_ALWAYS_INLINE [[gnu::always_inline]] inline
#define TOWER_CPU_VARIANTS(name, params, args)                                                   \
  [[gnu::target("avx512f")]] void name##_avx512 params { name##_body args; }                     \
  [[gnu::target("avx2,fma")]] void name##_avx2 params { name##_body args; }                      \
  void name##_baseline params { name##_body args; }                                              \
  void name params {                                                                             \
    static const auto variant = ::tower::cpu_isa() >= ::tower::CpuIsa::avx512 ? name##_avx512    \
                                : ::tower::cpu_isa() >= ::tower::CpuIsa::avx2 ? name##_avx2      \
                                                                              : name##_baseline; \
    variant args;                                                                                \
  }

namespace tower::cpu {

// Vectors of L floats or ints (GCC's vector extensions): one register in the AVX2 (L = 8) or
// AVX-512 (L = 16) clone, several in the baseline one. Arithmetic, comparisons (giving 0 / -1
// lanes) and `mask ? a : b` work lane by lane. (GCC drops vector_size on a dependent alias
// template, so each width is spelled out.)
template <int L>
struct Vectors;
template <>
struct Vectors<8> {
  using F = float __attribute__((vector_size(32)));
  using I = int32_t __attribute__((vector_size(32)));
};
template <>
struct Vectors<16> {
  using F = float __attribute__((vector_size(64)));
  using I = int32_t __attribute__((vector_size(64)));
};
// Unaligned loads and stores (by reference: returning a vector by value warns about the ABI).
template <typename V>
TOWER_ALWAYS_INLINE void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <typename V>
TOWER_ALWAYS_INLINE void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace tower::cpu
