// Minimal PNG encoding (8-bit, no interlace) for TensorBoard image summaries.
#pragma once

#include <cstdint>
#include <vector>

namespace tower {

// Encodes HWC uint8 pixels; channels 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA).
std::vector<uint8_t> png_encode(const uint8_t* pixels, int height, int width, int channels);

}  // namespace tower
