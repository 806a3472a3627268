// CRC-32C (Castagnoli): the checksum of TFRecord framing (TensorBoard event files), of checkpoint
// tensors and of the image cache.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tower {

// Continues a CRC-32C over `n` more bytes; crc32c_extend(0, ...) starts a new one.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// TFRecord stores CRCs masked, because a CRC computed over bytes that embed CRCs is weak.
uint32_t crc32c_mask(uint32_t crc);
uint32_t crc32c_unmask(uint32_t masked);

}  // namespace tower
