#include "tower/core/denormals.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tower {
namespace {
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;  // MXCSR bits
#endif
}  // namespace

bool denormals_are_zero() {
#if defined(__x86_64__) || defined(__i386__)
  return (_mm_getcsr() & (kFlushToZero | kDenormalsAreZero)) == (kFlushToZero | kDenormalsAreZero);
#else
  return false;
#endif
}

void set_denormals_are_zero(bool on) {
#if defined(__x86_64__) || defined(__i386__)
  const unsigned bits = kFlushToZero | kDenormalsAreZero;
  _mm_setcsr(on ? _mm_getcsr() | bits : _mm_getcsr() & ~bits);
#else
  (void)on;
#endif
}

}  // namespace tower
