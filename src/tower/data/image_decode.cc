#include "tower/data/image_decode.h"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "tower/core/error.h"

namespace tower {
namespace {

// Larger images are refused before any allocation (a hostile header could ask for terabytes).
constexpr int64_t kMaxSide = 65535, kMaxPixels = int64_t{1} << 28;
void check_size(int64_t height, int64_t width, const char* kind, const std::string& file) {
  if (height < 1 || width < 1) fail("{}: corrupt {} image: it has no pixels", file, kind);
  if (height > kMaxSide || width > kMaxSide || height * width > kMaxPixels)
    fail("{}: a {} image of {}x{} pixels (at most {} a side and {} megapixels are read)", file,
         kind, width, height, kMaxSide, kMaxPixels >> 20);
}

bool is_png(std::span<const uint8_t> b) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), signature, 8) == 0;
}
bool is_jpeg(std::span<const uint8_t> b) {
  return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& file) {
  // One decompressor per thread: making one costs about as much as decoding a 32x32 image.
  thread_local std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
  if (!tj) fail("{}: cannot start the JPEG decoder", file);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  auto* data = const_cast<unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  if (tjDecompressHeader3(tj.get(), data, size, &width, &height, &subsampling, &colorspace) != 0)
    fail("{}: not a readable JPEG image: {}", file, tjGetErrorStr2(tj.get()));
  check_size(height, width, "JPEG", file);
  DecodedImage image;
  image.height = height;
  image.width = width;
  image.channels = colorspace == TJCS_GRAY ? 1 : 3;
  image.pixels.resize(static_cast<size_t>(height) * width * image.channels);
  // A truncated file decodes with a warning (the rest grey): that is damage, not an image.
  if (tjDecompress2(tj.get(), data, size, image.pixels.data(), width, 0, height,
                    image.channels == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    fail("{}: corrupt or truncated JPEG image: {}", file, tjGetErrorStr2(tj.get()));
  return image;
}

// The IHDR chunk opens every PNG: its width and height, big-endian, at bytes 16-23.
ImageInfo png_info(std::span<const uint8_t> b, const std::string& file) {
  if (b.size() < 24 || std::memcmp(b.data() + 12, "IHDR", 4) != 0)
    fail("{}: corrupt or truncated PNG image (no IHDR header)", file);
  const auto be32 = [&](size_t at) {
    return int64_t{b[at]} << 24 | int64_t{b[at + 1]} << 16 | int64_t{b[at + 2]} << 8 | b[at + 3];
  };
  return {.height = be32(20), .width = be32(16), .format = "PNG"};
}

DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& file) {
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> ctx(spng_ctx_new(0), spng_ctx_free);
  if (!ctx) fail("{}: cannot start the PNG decoder", file);
  auto check = [&](int code, const char* what) {
    if (code != 0)
      fail("{}: corrupt or truncated PNG image ({}: {})", file, what, spng_strerror(code));
  };
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  check(spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size()), "buffer");
  spng_set_image_limits(ctx.get(), kMaxSide, kMaxSide);
  spng_set_chunk_limits(ctx.get(), 1u << 26, 1u << 28);
  spng_ihdr ihdr{};
  check(spng_get_ihdr(ctx.get(), &ihdr), "header");
  check_size(ihdr.height, ihdr.width, "PNG", file);
  // 8-bit grey and RGB stay as they are; everything else (palette, 16-bit, alpha) becomes RGBA8.
  const bool grey = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 8;
  const bool rgb = ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR && ihdr.bit_depth == 8;
  const int format = grey ? SPNG_FMT_G8 : rgb ? SPNG_FMT_RGB8 : SPNG_FMT_RGBA8;
  size_t size = 0;
  check(spng_decoded_image_size(ctx.get(), format, &size), "size");
  DecodedImage image;
  image.height = ihdr.height;
  image.width = ihdr.width;
  image.channels = grey ? 1 : rgb ? 3 : 4;
  image.pixels.resize(size);
  check(spng_decode_image(ctx.get(), image.pixels.data(), size, format, 0), "data");
  return image;
}

// Output position o of an axis of `out` samples, cropped from a resize of `in` samples to
// `resized`, starting at `offset`: the input samples and their weights (a triangle filter whose
// support widens with the shrink factor; clipped to the image and normalized).
struct Taps {
  std::vector<int64_t> first;
  std::vector<int> count;
  std::vector<float> weights;  // `max_taps` per output position
  int max_taps = 0;
};
Taps make_taps(int64_t in, int64_t resized, int64_t offset, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(resized);
  const double support = std::max(1.0, scale);
  Taps t;
  t.max_taps = static_cast<int>(std::ceil(2 * support)) + 2;  // bounds hi - lo below
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.weights.assign(static_cast<size_t>(out * t.max_taps), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    const double centre = (static_cast<double>(o + offset) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(centre - support)));
    const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(centre + support)));
    double total = 0;
    std::vector<double> w;
    for (int64_t i = lo; i < hi; ++i) {
      const double d = std::abs((static_cast<double>(i) + 0.5 - centre) / support);
      w.push_back(std::max(0.0, 1.0 - d));
      total += w.back();
    }
    const int n = static_cast<int>(w.size());
    t.first[static_cast<size_t>(o)] = lo;
    t.count[static_cast<size_t>(o)] = n;
    for (int k = 0; k < n; ++k)
      t.weights[static_cast<size_t>(o * t.max_taps + k)] =
          static_cast<float>(total > 0 ? w[static_cast<size_t>(k)] / total : (k == 0 ? 1 : 0));
  }
  return t;
}

}  // namespace

ImageInfo image_info(std::span<const uint8_t> bytes, const std::string& file) {
  if (is_png(bytes)) return png_info(bytes, file);
  if (!is_jpeg(bytes)) fail("{}: neither a JPEG nor a PNG image", file);
  thread_local std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (!tj || tjDecompressHeader3(tj.get(), const_cast<unsigned char*>(bytes.data()),
                                 static_cast<unsigned long>(bytes.size()), &width, &height,
                                 &subsampling, &colorspace) != 0)
    fail("{}: not a readable JPEG image", file);
  return {.height = height, .width = width, .format = "JPEG"};
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& file) {
  if (is_jpeg(bytes)) return decode_jpeg(bytes, file);
  if (is_png(bytes)) return decode_png(bytes, file);
  fail("{}: neither a JPEG nor a PNG image (by its first bytes)", file);
}

DecodedImage convert_channels(const DecodedImage& image, int64_t channels) {
  if (channels != 1 && channels != 3)
    fail("images can be brought to 1 or 3 channels, not {}", channels);
  if (image.channels == channels) return image;
  DecodedImage out{image.height, image.width, channels, {}};
  const size_t n = static_cast<size_t>(image.height * image.width);
  out.pixels.resize(n * static_cast<size_t>(channels));
  const uint8_t* p = image.pixels.data();
  const size_t c = static_cast<size_t>(image.channels);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* px = p + i * c;
    if (channels == 1) {
      // Pillow's convert("L"): (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16.
      out.pixels[i] = c < 3
                          ? px[0]
                          : static_cast<uint8_t>(
                                (px[0] * 19595u + px[1] * 38470u + px[2] * 7471u + 0x8000u) >> 16);
    } else {
      for (size_t k = 0; k < 3; ++k) out.pixels[i * 3 + k] = c < 3 ? px[0] : px[k];
    }
  }
  return out;
}

void fit_image(const DecodedImage& image, int64_t height, int64_t width, uint8_t* out) {
  const int64_t h = image.height, w = image.width, c = image.channels;
  const size_t plane = static_cast<size_t>(height * width);
  if (h == height && w == width) {  // HWC -> CHW, a plane at a time
    for (int64_t k = 0; k < c; ++k) {
      uint8_t* dst = out + static_cast<size_t>(k) * plane;
      const uint8_t* src = image.pixels.data() + k;
      for (size_t p = 0; p < plane; ++p) dst[p] = src[p * static_cast<size_t>(c)];
    }
    return;
  }
  // Cover the target: the shorter side (relative to the target's) fits, the other overhangs.
  const double scale = std::max(static_cast<double>(height) / static_cast<double>(h),
                                static_cast<double>(width) / static_cast<double>(w));
  const int64_t rh = std::max(height, static_cast<int64_t>(std::llround(h * scale)));
  const int64_t rw = std::max(width, static_cast<int64_t>(std::llround(w * scale)));
  const Taps ty = make_taps(h, rh, (rh - height) / 2, height);
  const Taps tx = make_taps(w, rw, (rw - width) / 2, width);
  // Horizontal pass over every input row, then the vertical one.
  std::vector<float> rows(static_cast<size_t>(h * width * c));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t k = 0; k < c; ++k) {
        float sum = 0;
        const size_t t = static_cast<size_t>(x);
        for (int i = 0; i < tx.count[t]; ++i)
          sum += tx.weights[t * static_cast<size_t>(tx.max_taps) + static_cast<size_t>(i)] *
                 image.pixels[static_cast<size_t>((y * w + tx.first[t] + i) * c + k)];
        rows[static_cast<size_t>((y * width + x) * c + k)] = sum;
      }
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t k = 0; k < c; ++k) {
        float sum = 0;
        const size_t t = static_cast<size_t>(y);
        for (int i = 0; i < ty.count[t]; ++i)
          sum += ty.weights[t * static_cast<size_t>(ty.max_taps) + static_cast<size_t>(i)] *
                 rows[static_cast<size_t>(((ty.first[t] + i) * width + x) * c + k)];
        out[static_cast<size_t>(k) * plane + static_cast<size_t>(y * width + x)] =
            static_cast<uint8_t>(std::clamp(std::lround(sum), 0L, 255L));
      }
}

void decode_to_size(std::span<const uint8_t> bytes, const std::string& file, int64_t channels,
                    int64_t height, int64_t width, uint8_t* out) {
  DecodedImage image = decode_image(bytes, file);
  if (image.channels != channels) image = convert_channels(image, channels);
  fit_image(image, height, width, out);
}

}  // namespace tower
