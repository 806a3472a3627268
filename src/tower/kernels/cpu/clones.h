// Hand-written CPU loops compiled several times, for AVX-512, AVX2 and the baseline, the CPU
// picking one when the program loads (the build itself targets the baseline x86-64). Put
// TOWER_CPU_CLONES on a plain (non-template) function; the templates it calls should be
// [[gnu::always_inline]] so that they are compiled into each clone.
#pragma once

// ThreadSanitizer's runtime is not up yet when the dynamic loader runs the clones' resolver (it
// crashes at start-up), so tsan builds compile one generic version.
#if defined(__SANITIZE_THREAD__)
#define TOWER_CPU_CLONES
#else
#define TOWER_CPU_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#endif
#define TOWER_ALWAYS_INLINE [[gnu::always_inline]] inline

#include <cstdint>
#include <cstring>

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
