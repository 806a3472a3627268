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
