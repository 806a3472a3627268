// libFuzzer target: JPEG and PNG decoding, then the channel conversion and the size rule of image
// folders. Any input must either decode or throw tower::Error. The first byte picks the target
// size (1..32 pixels a side) and channels; the rest is the file.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tower/core/error.h"
#include "tower/data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t side = 1 + (data[0] & 31), channels = (data[0] & 32) ? 3 : 1;
  try {
    tower::DecodedImage image =
        tower::decode_image(std::span<const uint8_t>(data + 1, size - 1), "fuzz.img");
    // Bound the work on huge headers that decode (the fuzzer's inputs are small anyway).
    if (image.height * image.width > (1 << 22)) return 0;
    if (image.channels != channels) image = tower::convert_channels(image, channels);
    std::vector<uint8_t> out(static_cast<size_t>(channels * side * side));
    tower::fit_image(image, side, side, out.data());
  } catch (const tower::Error&) {
  }
  return 0;
}
