#include "tower/io/png.h"

#include <zlib.h>

#include <cstring>
#include <string_view>

#include "tower/core/error.h"

namespace tower {
namespace {

void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, std::string_view type, const std::vector<uint8_t>& data) {
  put_u32_be(out, static_cast<uint32_t>(data.size()));
  size_t type_at = out.size();
  out.insert(out.end(), type.begin(), type.end());
  out.insert(out.end(), data.begin(), data.end());
  // The chunk CRC (zlib's CRC-32) covers the type and the data, not the length.
  uLong crc = crc32(0L, out.data() + type_at, static_cast<uInt>(out.size() - type_at));
  put_u32_be(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::vector<uint8_t> png_encode(const uint8_t* pixels, int height, int width, int channels) {
  if (height <= 0 || width <= 0 || height > (1 << 24) || width > (1 << 24))
    fail("cannot encode a {}x{} image as PNG: height and width must be in [1, 2^24]", height,
         width);
  uint8_t color_type = 0;
  switch (channels) {
    case 1:
      color_type = 0;
      break;
    case 2:
      color_type = 4;
      break;
    case 3:
      color_type = 2;
      break;
    case 4:
      color_type = 6;
      break;
    default:
      fail("cannot encode an image with {} channels as PNG (expected 1, 2, 3 or 4)", channels);
  }
  const size_t row = static_cast<size_t>(width) * static_cast<size_t>(channels);
  // Each scanline is prefixed by its filter type; 0 (none) keeps the encoder trivial.
  std::vector<uint8_t> raw((row + 1) * static_cast<size_t>(height));
  for (size_t y = 0; y < static_cast<size_t>(height); ++y) {
    raw[y * (row + 1)] = 0;
    std::memcpy(&raw[y * (row + 1) + 1], pixels + y * row, row);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> packed(packed_size);
  if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()),
                Z_DEFAULT_COMPRESSION) != Z_OK)
    fail("cannot encode a {}x{}x{} image as PNG: zlib compression failed", height, width, channels);
  packed.resize(packed_size);

  std::vector<uint8_t> ihdr;
  put_u32_be(ihdr, static_cast<uint32_t>(width));
  put_u32_be(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(),
              {8, color_type, 0, 0, 0});  // bit depth, color, deflate, filter, no interlace

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", {});
  return png;
}

}  // namespace tower
