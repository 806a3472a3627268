// Image transforms on float CHW images, and the TransformSpec that chains them for the pipeline.
// Pixel values stay on the 0-255 scale unless a transform says otherwise. The random ones take
// their random numbers from a Philox stream keyed by (seed, epoch, example), so an example is
// transformed the same way whichever worker thread handles it.
#pragma once

#include <cstdint>
#include <vector>

#include "tower/core/philox.h"
#include "tower/core/shape.h"

namespace tower {

// One image, float, (C, H, W) row-major.
struct Image {
  int channels = 0, height = 0, width = 0;
  std::vector<float> pixels;

  Image() = default;
  Image(int c, int h, int w)
      : channels(c), height(h), width(w), pixels(static_cast<size_t>(c) * h * w, 0.0f) {}
  float& at(int c, int y, int x) {
    return pixels[(static_cast<size_t>(c) * height + y) * width + x];
  }
  const float& at(int c, int y, int x) const {
    return pixels[(static_cast<size_t>(c) * height + y) * width + x];
  }
};

Image image_from_u8(const uint8_t* chw, int channels, int height, int width);

// The window of `height` x `width` starting at (top, left); throws if it leaves the image.
Image crop(const Image& image, int top, int left, int height, int width);
Image central_crop(const Image& image, int height, int width);  // offsets (H-h)/2, (W-w)/2
Image pad(const Image& image, int padding);                     // zeros on all four sides
void flip_left_right(Image& image);
void adjust_brightness(Image& image, float delta);  // x + delta, no clipping (as TF's tutorial)
// (x - mean_c) * factor + mean_c, with mean_c the mean of channel c; no clipping.
void adjust_contrast(Image& image, float factor);
// (x - mean) / max(stddev, 1/sqrt(numel)) over all values of the image (TF's
// per_image_standardization).
void standardize(Image& image);
// (x - mean[c]) / stddev[c], one entry per channel.
void normalize(Image& image, const std::vector<float>& mean, const std::vector<float>& stddev);
void scale(Image& image, float factor);  // x * factor, e.g. 1/255 to map to [0, 1]

// random_resized: a random part of the image (an area fraction and an aspect ratio drawn at
// random) resized to crop_height x crop_width, as torchvision's RandomResizedCrop.
enum class Crop { none, random, central, random_resized };

// What the pipeline does to each example, in this order: pad, crop, flip, brightness, contrast,
// scale, normalize, standardize. Defaults do nothing (images are only converted to float).
struct TransformSpec {
  int padding = 0;  // zero padding on each side, before the crop
  Crop crop = Crop::none;
  int crop_height = 0, crop_width = 0;   // with Crop::random / Crop::central
  float min_area = 0.08f, max_area = 1;  // Crop::random_resized: the part's area fraction
  float min_ratio = 3 / 4.0f, max_ratio = 4 / 3.0f;  // and its aspect ratio (log-uniform)
  bool random_flip = false;                          // left-right, probability 1/2
  float max_brightness_delta = 0;                    // delta uniform in [-max, max]
  float min_contrast = 1, max_contrast = 1;          // factor uniform in [min, max]
  float scale = 1;                                   // e.g. 1/255.f
  std::vector<float> mean{}, stddev{};               // per-channel normalization when non-empty
  bool standardize = false;                          // per-image standardization, last
};

// The classic TF CIFAR-10 tutorial's training distortions: random 24x24 crop, random flip,
// brightness delta up to 63, contrast in [0.2, 1.8], per-image standardization.
TransformSpec cifar10_train_transform();
// Its evaluation preprocessing: central 24x24 crop, per-image standardization.
TransformSpec cifar10_eval_transform();
// Pad-and-random-crop augmentation (e.g. padding 4 keeps 32x32) with flip, scaled to [0, 1].
TransformSpec pad_crop_flip_transform(int padding);
// The ImageNet recipe's augmentation: a random resized crop (8% to 100% of the area, aspect 3/4
// to 4/3) to height x width, flip, scaled to [0, 1]; its evaluation is the central crop of that
// size (of images brought to a larger size: torchvision's resize 256, crop 224).
TransformSpec random_resized_crop_transform(int height, int width);
TransformSpec central_crop_transform(int height, int width);

// Where a random resized crop takes its part of a height x width image: torchvision's rule (up
// to 10 draws of area and aspect that fit, else the central part of the nearest aspect in range),
// with the random numbers `rng` draws from index 8 on.
struct Region {
  int top = 0, left = 0, height = 0, width = 0;
};
Region random_resized_region(const TransformSpec& spec, int height, int width, const Philox& rng);

// The (C, H, W) a transform produces from input images of shape `input` (C, H, W); throws
// tower::Error when the spec does not fit the images (crop larger than the image, wrong number
// of normalization channels).
Shape transform_output_shape(const TransformSpec& spec, const Shape& input);

// Applies the spec to one u8 CHW image, writing the float CHW result to `out`
// (transform_output_shape(...).numel() values). Draws random numbers 0..4 of `rng`.
void apply_transform(const TransformSpec& spec, const uint8_t* chw, const Shape& input,
                     const Philox& rng, float* out);

}  // namespace tower
