// JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libspng) decoding, and the fixed rule that brings
// an image of any size to a data set's size: resize so that the shorter side fits (a triangle
// filter, widened when shrinking, as Pillow's BILINEAR), then crop the centre.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tower {

// 8-bit pixels, rows of width * channels interleaved values (HWC).
struct DecodedImage {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 (grey), 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;
};

// Decodes a JPEG or PNG file's bytes (by their signature); `file` names it in errors. A corrupt or
// truncated image is a tower::Error naming the file.
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& file);

// A JPEG's or PNG's size and format from its header alone (no pixels decoded); errors name `file`.
struct ImageInfo {
  int64_t height = 0, width = 0;
  const char* format = "";  // "JPEG" or "PNG"
};
ImageInfo image_info(std::span<const uint8_t> bytes, const std::string& file);

// `image` with `channels` (1 or 3) channels: grey from RGB as ITU-R 601 luma with Pillow's
// integer weights, RGB from grey by repeating it, alpha dropped.
DecodedImage convert_channels(const DecodedImage& image, int64_t channels);

// A file's bytes as a data set's image: decoded, brought to `channels` (convert_channels) and to
// height x width (fit_image), written as CHW planes to `out`. Errors name `file`.
void decode_to_size(std::span<const uint8_t> bytes, const std::string& file, int64_t channels,
                    int64_t height, int64_t width, uint8_t* out);

// The image brought to height x width: resized so that it covers the size (its shorter side,
// relative to the target's, fits), then its centre cropped. Unchanged when it already has the
// size. Writes CHW planes (the data sets' layout) to `out` (channels * height * width bytes).
void fit_image(const DecodedImage& image, int64_t height, int64_t width, uint8_t* out);

}  // namespace tower
