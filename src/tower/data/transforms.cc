#include "tower/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tower/core/error.h"

namespace tower {

Image image_from_u8(const uint8_t* chw, int channels, int height, int width) {
  Image image(channels, height, width);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = chw[i];
  return image;
}

Image crop(const Image& image, int top, int left, int height, int width) {
  if (top < 0 || left < 0 || height < 0 || width < 0 || top + height > image.height ||
      left + width > image.width)
    fail("crop of {}x{} at ({}, {}) does not fit in a {}x{} image", height, width, top, left,
         image.height, image.width);
  Image out(image.channels, height, width);
  for (int c = 0; c < image.channels; ++c)
    for (int y = 0; y < height; ++y)
      std::memcpy(&out.at(c, y, 0), &image.at(c, top + y, left), sizeof(float) * width);
  return out;
}

Image central_crop(const Image& image, int height, int width) {
  return crop(image, (image.height - height) / 2, (image.width - width) / 2, height, width);
}

Image pad(const Image& image, int padding) {
  Image out(image.channels, image.height + 2 * padding, image.width + 2 * padding);
  for (int c = 0; c < image.channels; ++c)
    for (int y = 0; y < image.height; ++y)
      std::memcpy(&out.at(c, y + padding, padding), &image.at(c, y, 0),
                  sizeof(float) * image.width);
  return out;
}

void flip_left_right(Image& image) {
  for (int c = 0; c < image.channels; ++c)
    for (int y = 0; y < image.height; ++y)
      std::reverse(&image.at(c, y, 0), &image.at(c, y, 0) + image.width);
}

void adjust_brightness(Image& image, float delta) {
  for (float& v : image.pixels) v += delta;
}

void adjust_contrast(Image& image, float factor) {
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  for (int c = 0; c < image.channels; ++c) {
    float* p = image.pixels.data() + c * plane;
    double sum = 0;
    for (size_t i = 0; i < plane; ++i) sum += p[i];
    const float mean = static_cast<float>(sum / static_cast<double>(plane));
    for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - mean) * factor + mean;
  }
}

void standardize(Image& image) {
  const size_t n = image.pixels.size();
  if (n == 0) return;
  double sum = 0, sum_sq = 0;
  for (float v : image.pixels) sum += v;
  const double mean = sum / static_cast<double>(n);
  for (float v : image.pixels) sum_sq += (v - mean) * (v - mean);
  const double stddev = std::sqrt(sum_sq / static_cast<double>(n));
  // The floor keeps a uniform image (stddev 0) finite, as TF's per_image_standardization does.
  const double divisor = std::max(stddev, 1.0 / std::sqrt(static_cast<double>(n)));
  const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / divisor);
  for (float& v : image.pixels) v = (v - m) * inv;
}

void normalize(Image& image, const std::vector<float>& mean, const std::vector<float>& stddev) {
  if (mean.size() != static_cast<size_t>(image.channels) || stddev.size() != mean.size())
    fail("normalization has {} means and {} standard deviations for a {}-channel image",
         mean.size(), stddev.size(), image.channels);
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  for (int c = 0; c < image.channels; ++c) {
    float* p = image.pixels.data() + c * plane;
    for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - mean[c]) / stddev[c];
  }
}

void scale(Image& image, float factor) {
  for (float& v : image.pixels) v *= factor;
}

TransformSpec cifar10_train_transform() {
  return {.crop = Crop::random,
          .crop_height = 24,
          .crop_width = 24,
          .random_flip = true,
          .max_brightness_delta = 63,
          .min_contrast = 0.2f,
          .max_contrast = 1.8f,
          .standardize = true};
}

TransformSpec cifar10_eval_transform() {
  return {.crop = Crop::central, .crop_height = 24, .crop_width = 24, .standardize = true};
}

TransformSpec pad_crop_flip_transform(int padding) {
  return {.padding = padding, .crop = Crop::random, .random_flip = true, .scale = 1 / 255.0f};
}

TransformSpec random_resized_crop_transform(int height, int width) {
  return {.crop = Crop::random_resized,
          .crop_height = height,
          .crop_width = width,
          .random_flip = true,
          .scale = 1 / 255.0f};
}

TransformSpec central_crop_transform(int height, int width) {
  return {.crop = Crop::central, .crop_height = height, .crop_width = width, .scale = 1 / 255.0f};
}

Region random_resized_region(const TransformSpec& spec, int height, int width, const Philox& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(spec.min_ratio), log_hi = std::log(spec.max_ratio);
  for (uint64_t attempt = 0; attempt < 10; ++attempt) {
    const uint64_t at = 8 + 4 * attempt;
    const double target =
        area * (spec.min_area + rng.uniform(at) * (spec.max_area - spec.min_area));
    const double ratio = std::exp(log_lo + rng.uniform(at + 1) * (log_hi - log_lo));
    const int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w <= 0 || h <= 0 || w > width || h > height) continue;
    return {static_cast<int>(rng.below(at + 2, static_cast<uint32_t>(height - h + 1))),
            static_cast<int>(rng.below(at + 3, static_cast<uint32_t>(width - w + 1))), h, w};
  }
  // None fit: the whole image, cut to the nearest aspect ratio in range, centred.
  const double ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (ratio < spec.min_ratio) h = static_cast<int>(std::lround(w / spec.min_ratio));
  if (ratio > spec.max_ratio) w = static_cast<int>(std::lround(h * spec.max_ratio));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

namespace {

struct Window {
  int height, width;  // of the crop
  int padded_height, padded_width;
};

Window window_of(const TransformSpec& spec, const Shape& input) {
  if (input.rank() != 3)
    fail("transforms expect (C, H, W) images, got shape {}", input.to_string());
  if (spec.padding < 0) fail("transform padding {} is negative", spec.padding);
  Window w;
  w.padded_height = static_cast<int>(input[1]) + 2 * spec.padding;
  w.padded_width = static_cast<int>(input[2]) + 2 * spec.padding;
  w.height = w.padded_height;
  w.width = w.padded_width;
  if (spec.crop == Crop::random_resized) {
    if (spec.crop_height < 1 || spec.crop_width < 1 || spec.padding != 0)
      fail("a random resized crop needs a size (got {}x{}) and no padding", spec.crop_height,
           spec.crop_width);
    if (!(spec.min_area > 0 && spec.min_area <= spec.max_area && spec.max_area <= 1 &&
          spec.min_ratio > 0 && spec.min_ratio <= spec.max_ratio))
      fail(
          "a random resized crop needs 0 < min_area <= max_area <= 1 and 0 < min_ratio <= "
          "max_ratio");
    w.height = spec.crop_height;
    w.width = spec.crop_width;
  } else if (spec.crop != Crop::none) {
    // A crop size of 0 means the image size before padding (pad-and-crop keeps the size).
    w.height = spec.crop_height > 0 ? spec.crop_height : static_cast<int>(input[1]);
    w.width = spec.crop_width > 0 ? spec.crop_width : static_cast<int>(input[2]);
    if (w.height > w.padded_height || w.width > w.padded_width)
      fail("crop {}x{} is larger than the {}x{} images{}", w.height, w.width, w.padded_height,
           w.padded_width, spec.padding > 0 ? " (after padding)" : "");
  }
  return w;
}

}  // namespace

Shape transform_output_shape(const TransformSpec& spec, const Shape& input) {
  Window w = window_of(spec, input);
  if (!spec.mean.empty() || !spec.stddev.empty()) {
    if (spec.mean.size() != static_cast<size_t>(input[0]) || spec.stddev.size() != spec.mean.size())
      fail("normalization has {} means and {} standard deviations for {}-channel images",
           spec.mean.size(), spec.stddev.size(), input[0]);
    for (float s : spec.stddev)
      if (!(s > 0)) fail("normalization standard deviation {} is not positive", s);
  }
  if (spec.min_contrast > spec.max_contrast)
    fail("contrast range [{}, {}] is empty", spec.min_contrast, spec.max_contrast);
  return Shape{input[0], w.height, w.width};
}

namespace {

// The steps after the crop and flip: brightness, contrast, scale, normalization.
void finish_transform(const TransformSpec& spec, const Philox& rng, Image& image) {
  if (spec.max_brightness_delta != 0)
    adjust_brightness(image, (2 * rng.uniform(3) - 1) * spec.max_brightness_delta);
  if (spec.min_contrast != 1 || spec.max_contrast != 1)
    adjust_contrast(image,
                    spec.min_contrast + rng.uniform(4) * (spec.max_contrast - spec.min_contrast));
  if (spec.scale != 1) scale(image, spec.scale);
  if (!spec.mean.empty()) normalize(image, spec.mean, spec.stddev);
  if (spec.standardize) standardize(image);
}

// The weights of a triangle filter from the `length` source pixels from `start` to `out`
// destination pixels, widened by the scale when shrinking (as Pillow's BILINEAR) and cut to the
// region (torchvision crops, then resizes): per destination, its first source index and the
// weights from there.
struct Taps {
  std::vector<int> first;
  std::vector<std::vector<float>> weights;
};
Taps triangle_taps(int start, int length, int out) {
  Taps t;
  const double scale = static_cast<double>(length) / out, support = std::max(scale, 1.0);
  for (int d = 0; d < out; ++d) {
    const double centre = start + (d + 0.5) * scale;
    const int lo = std::max(start, static_cast<int>(std::floor(centre - support)));
    const int hi = std::min(start + length, static_cast<int>(std::ceil(centre + support)));
    std::vector<float> w;
    double total = 0;
    for (int s = lo; s < hi; ++s) {
      const double x = std::max(0.0, 1 - std::fabs((s + 0.5 - centre) / support));
      w.push_back(static_cast<float>(x));
      total += x;
    }
    for (float& x : w) x = static_cast<float>(x / (total > 0 ? total : 1));
    t.first.push_back(lo);
    t.weights.push_back(std::move(w));
  }
  return t;
}

// The region of the u8 CHW image resized to the output (rows, then columns), mirrored if `flip`.
Image resize_region(const uint8_t* chw, const Shape& input, const Region& r, int out_h, int out_w,
                    bool flip) {
  const int channels = static_cast<int>(input[0]);
  const int height = static_cast<int>(input[1]), width = static_cast<int>(input[2]);
  const Taps rows = triangle_taps(r.top, r.height, out_h);
  const Taps cols = triangle_taps(r.left, r.width, out_w);
  Image image(channels, out_h, out_w);
  std::vector<float> line(static_cast<size_t>(width));
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < out_h; ++y) {
      std::fill(line.begin(), line.end(), 0.0f);
      const std::vector<float>& wy = rows.weights[static_cast<size_t>(y)];
      for (size_t k = 0; k < wy.size(); ++k) {
        const uint8_t* src =
            chw +
            (static_cast<size_t>(c) * height + rows.first[static_cast<size_t>(y)] + k) * width;
        for (int x = r.left; x < r.left + r.width; ++x)
          line[static_cast<size_t>(x)] += wy[k] * src[x];
      }
      for (int x = 0; x < out_w; ++x) {
        const std::vector<float>& wx = cols.weights[static_cast<size_t>(x)];
        const int first = cols.first[static_cast<size_t>(x)];
        float sum = 0;
        for (size_t k = 0; k < wx.size(); ++k) sum += wx[k] * line[static_cast<size_t>(first) + k];
        image.at(c, y, flip ? out_w - 1 - x : x) = sum;
      }
    }
  return image;
}

}  // namespace

void apply_transform(const TransformSpec& spec, const uint8_t* chw, const Shape& input,
                     const Philox& rng, float* out) {
  const Window w = window_of(spec, input);
  const int channels = static_cast<int>(input[0]);
  const int height = static_cast<int>(input[1]), width = static_cast<int>(input[2]);
  if (spec.crop == Crop::random_resized) {
    const Region region = random_resized_region(spec, height, width, rng);
    const bool flip = spec.random_flip && rng.uniform(2) < 0.5f;
    Image image = resize_region(chw, input, region, w.height, w.width, flip);
    finish_transform(spec, rng, image);
    std::memcpy(out, image.pixels.data(), image.pixels.size() * sizeof(float));
    return;
  }
  int top = 0, left = 0;
  if (spec.crop == Crop::random) {
    top = static_cast<int>(rng.below(0, static_cast<uint32_t>(w.padded_height - w.height + 1)));
    left = static_cast<int>(rng.below(1, static_cast<uint32_t>(w.padded_width - w.width + 1)));
  } else if (spec.crop == Crop::central) {
    top = (w.padded_height - w.height) / 2;
    left = (w.padded_width - w.width) / 2;
  }
  const bool flip = spec.random_flip && rng.uniform(2) < 0.5f;
  // Pad, crop and flip in one gather: output (y, x) reads padded (top + y, left + x'), where
  // x' is mirrored when flipping; padded coordinates outside the image read zero. A row reads
  // the image on one run of x, [x0, x1), found once.
  Image image(channels, w.height, w.width);
  const int shift = left - spec.padding;  // sx = shift + x', x' = x or width - 1 - x
  const int lo = std::clamp(-shift, 0, w.width), hi = std::clamp(width - shift, lo, w.width);
  const int x0 = flip ? w.width - hi : lo, x1 = flip ? w.width - lo : hi;
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < w.height; ++y) {
      float* row = &image.at(c, y, 0);
      const int sy = top + y - spec.padding;
      if (sy < 0 || sy >= height) {
        std::fill(row, row + w.width, 0.0f);
        continue;
      }
      const uint8_t* src = chw + (static_cast<size_t>(c) * height + sy) * width;
      std::fill(row, row + x0, 0.0f);
      if (flip)
        for (int x = x0; x < x1; ++x) row[x] = src[shift + w.width - 1 - x];
      else
        for (int x = x0; x < x1; ++x) row[x] = src[shift + x];
      std::fill(row + x1, row + w.width, 0.0f);
    }
  finish_transform(spec, rng, image);
  std::memcpy(out, image.pixels.data(), image.pixels.size() * sizeof(float));
}

}  // namespace tower
