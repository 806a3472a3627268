#include "tower/core/crc32c.h"

#include <array>

namespace tower {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // Castagnoli, bit-reversed
constexpr uint32_t kMaskDelta = 0xa282ead8;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t extend_table(uint32_t state, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) state = kTable[(state ^ p[i]) & 0xff] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes the same polynomial 8 bytes at a time (checkpoints hash
// megabytes on every save and load).
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t state, const uint8_t* p,
                                                        size_t n) {
  uint64_t wide = state;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    __builtin_memcpy(&word, p, 8);
    wide = __builtin_ia32_crc32di(wide, word);
  }
  return extend_table(static_cast<uint32_t>(wide), p, n);
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return ~extend_sse42(~crc, p, n);
#endif
  return ~extend_table(~crc, p, n);
}

uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace tower
