#include "tower/io/crc32c.h"

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

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t state = ~crc;
  for (size_t i = 0; i < n; ++i) state = kTable[(state ^ p[i]) & 0xff] ^ (state >> 8);
  return ~state;
}

uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace tower
