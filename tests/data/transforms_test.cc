#include "tower/data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "data_test_util.h"

namespace tower {
namespace {

Image make_image(int c, int h, int w, std::vector<float> values) {
  Image image(c, h, w);
  image.pixels = std::move(values);
  return image;
}

void expect_pixels(const Image& image, const std::vector<float>& expected, float tol = 1e-5f) {
  ASSERT_EQ(image.pixels.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(image.pixels[i], expected[i], tol) << "pixel " << i;
}

Image iota_image(int c, int h, int w) {
  Image image(c, h, w);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<float>(i);
  return image;
}

TEST(Transforms, Crop) {
  Image out = crop(iota_image(1, 3, 4), 1, 1, 2, 2);
  EXPECT_EQ(out.height, 2);
  expect_pixels(out, {5, 6, 9, 10});
  expect_pixels(crop(iota_image(2, 2, 2), 1, 0, 1, 2), {2, 3, 6, 7});
  testing::expect_error([] { crop(iota_image(1, 3, 4), 2, 0, 2, 2); }, {"does not fit"});
}

TEST(Transforms, CentralCrop) {
  expect_pixels(central_crop(iota_image(1, 3, 4), 2, 2), {1, 2, 5, 6});
  expect_pixels(central_crop(iota_image(1, 4, 4), 2, 2), {5, 6, 9, 10});
}

TEST(Transforms, Pad) {
  Image out = pad(make_image(1, 1, 2, {1, 2}), 1);
  EXPECT_EQ(out.height, 3);
  EXPECT_EQ(out.width, 4);
  expect_pixels(out, {0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0});
}

TEST(Transforms, FlipLeftRight) {
  Image image = make_image(2, 2, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  flip_left_right(image);
  expect_pixels(image, {3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10});
}

TEST(Transforms, BrightnessDoesNotClip) {
  Image image = make_image(1, 1, 3, {0, 200, 255});
  adjust_brightness(image, 63);
  expect_pixels(image, {63, 263, 318});
  adjust_brightness(image, -100);
  expect_pixels(image, {-37, 163, 218});
}

TEST(Transforms, ContrastAroundEachChannelMean) {
  Image image = make_image(2, 1, 2, {1, 3, 10, 20});
  adjust_contrast(image, 2);  // channel means 2 and 15
  expect_pixels(image, {0, 4, 5, 25});
  image = make_image(2, 1, 2, {1, 3, 10, 20});
  adjust_contrast(image, 0.5f);
  expect_pixels(image, {1.5f, 2.5f, 12.5f, 17.5f});
}

TEST(Transforms, PerImageStandardization) {
  Image image = make_image(1, 2, 2, {1, 2, 3, 4});  // mean 2.5, stddev sqrt(1.25)
  standardize(image);
  expect_pixels(image, {-1.3416408f, -0.4472136f, 0.4472136f, 1.3416408f});
  // The stddev floor 1/sqrt(4) = 0.5: a uniform image becomes zeros, not NaN ...
  image = make_image(1, 2, 2, {5, 5, 5, 5});
  standardize(image);
  expect_pixels(image, {0, 0, 0, 0});
  // ... and a low-contrast one (stddev 0.1) is divided by 0.5.
  image = make_image(2, 1, 2, {0, 0.2f, 0, 0.2f});
  standardize(image);
  expect_pixels(image, {-0.2f, 0.2f, -0.2f, 0.2f});
}

TEST(Transforms, NormalizeAndScale) {
  Image image = make_image(2, 1, 2, {2, 4, 0, 1});
  normalize(image, {1, 0.5f}, {2, 0.25f});
  expect_pixels(image, {0.5f, 1.5f, -2, 2});
  testing::expect_error([&] { normalize(image, {1}, {1}); }, {"1 means", "2-channel"});
  image = make_image(1, 1, 3, {0, 51, 255});
  scale(image, 1 / 255.0f);
  expect_pixels(image, {0, 0.2f, 1});
}

TEST(Transforms, OutputShape) {
  EXPECT_EQ(transform_output_shape(cifar10_train_transform(), Shape{3, 32, 32}),
            (Shape{3, 24, 24}));
  EXPECT_EQ(transform_output_shape(cifar10_eval_transform(), Shape{3, 32, 32}), (Shape{3, 24, 24}));
  EXPECT_EQ(transform_output_shape(pad_crop_flip_transform(4), Shape{3, 32, 32}),
            (Shape{3, 32, 32}));
  EXPECT_EQ(transform_output_shape({}, Shape{1, 28, 28}), (Shape{1, 28, 28}));
  EXPECT_EQ(transform_output_shape({.padding = 2}, Shape{1, 28, 28}), (Shape{1, 32, 32}));
  testing::expect_error(
      [] {
        transform_output_shape(cifar10_train_transform(), Shape{1, 20, 20});
      },
      {"crop 24x24 is larger than the 20x20 images"});
  testing::expect_error(
      [] {
        transform_output_shape({.mean = {0.5f}, .stddev = {0.2f}}, Shape{3, 32, 32});
      },
      {"1 means", "3-channel"});
}

// The eval preprocessing on a hand-computed 4x4 image: crop {5, 6, 9, 10}, mean 7.5,
// stddev sqrt(4.25).
TEST(Transforms, EvalTransformByHand) {
  std::vector<uint8_t> pixels(16);
  for (int i = 0; i < 16; ++i) pixels[i] = static_cast<uint8_t>(i);
  TransformSpec spec{.crop = Crop::central, .crop_height = 2, .crop_width = 2, .standardize = true};
  float out[4];
  apply_transform(spec, pixels.data(), Shape{1, 4, 4}, Philox(0, 0), out);
  const float s = std::sqrt(4.25f);
  EXPECT_NEAR(out[0], -2.5f / s, 1e-5f);
  EXPECT_NEAR(out[1], -1.5f / s, 1e-5f);
  EXPECT_NEAR(out[2], 1.5f / s, 1e-5f);
  EXPECT_NEAR(out[3], 2.5f / s, 1e-5f);
}

// The fused apply_transform equals the individual transforms applied in the documented order
// with the documented random draws (0: crop top, 1: crop left, 2: flip, 3: brightness,
// 4: contrast), for the CIFAR-10 training distortions and for pad-and-crop.
TEST(Transforms, ApplyTransformMatchesComposition) {
  std::vector<uint8_t> pixels(3 * 32 * 32);
  Philox fill(9, 9);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(fill.u32(i));
  int flips = 0;
  std::vector<int> tops(9, 0);
  for (uint64_t example = 0; example < 200; ++example) {
    Philox rng(42, example);
    for (const TransformSpec& spec : {cifar10_train_transform(), pad_crop_flip_transform(4)}) {
      Shape out_shape = transform_output_shape(spec, Shape{3, 32, 32});
      std::vector<float> out(static_cast<size_t>(out_shape.numel()));
      apply_transform(spec, pixels.data(), Shape{3, 32, 32}, rng, out.data());

      Image expected = pad(image_from_u8(pixels.data(), 3, 32, 32), spec.padding);
      const int h = static_cast<int>(out_shape[1]), w = static_cast<int>(out_shape[2]);
      const int top =
          static_cast<int>(rng.below(0, static_cast<uint32_t>(expected.height - h + 1)));
      const int left =
          static_cast<int>(rng.below(1, static_cast<uint32_t>(expected.width - w + 1)));
      expected = crop(expected, top, left, h, w);
      const bool flip = rng.uniform(2) < 0.5f;
      if (flip) flip_left_right(expected);
      if (spec.max_brightness_delta > 0) {
        const float delta = (2 * rng.uniform(3) - 1) * 63;
        const float factor = 0.2f + 1.6f * rng.uniform(4);
        EXPECT_LE(std::fabs(delta), 63.0f);
        EXPECT_GE(factor, 0.2f);
        EXPECT_LE(factor, 1.8f);
        adjust_brightness(expected, delta);
        adjust_contrast(expected, factor);
        standardize(expected);
        flips += flip;
        ++tops[static_cast<size_t>(top)];
      } else {
        scale(expected, 1 / 255.0f);
      }
      expect_pixels(expected, out, 1e-4f);
    }
  }
  EXPECT_GT(flips, 70);  // about half of 200
  EXPECT_LT(flips, 130);
  for (int count : tops) EXPECT_GT(count, 0);  // every crop offset 0..8 occurs
}

}  // namespace
}  // namespace tower

namespace tower {
namespace {

// torchvision's RandomResizedCrop rule: parts inside the image, of an area fraction and aspect
// ratio in range, each drawn from the example's own random stream; a part that never fits falls
// back to the central part of the nearest aspect ratio in range.
TEST(RandomResizedCrop, RegionsFitTheirRanges) {
  const TransformSpec spec = random_resized_crop_transform(28, 28);
  double smallest = 1, largest = 0;
  for (uint64_t example = 0; example < 500; ++example) {
    const Philox rng(7, example);
    const Region r = random_resized_region(spec, 40, 60, rng);
    ASSERT_TRUE(r.top >= 0 && r.left >= 0 && r.top + r.height <= 40 && r.left + r.width <= 60);
    const double area = static_cast<double>(r.height) * r.width / (40 * 60);
    smallest = std::min(smallest, area), largest = std::max(largest, area);
    const double ratio = static_cast<double>(r.width) / r.height;
    EXPECT_TRUE(ratio > 0.7 && ratio < 1.45) << ratio;  // 3/4 to 4/3, up to rounding
    const Region again = random_resized_region(spec, 40, 60, Philox(7, example));
    EXPECT_EQ(std::tie(r.top, r.left, r.height, r.width),
              std::tie(again.top, again.left, again.height, again.width));
  }
  EXPECT_LT(smallest, 0.15);
  EXPECT_GT(largest, 0.8);
  // A 2x100 strip: no draw fits; its central part of aspect 4/3 (2x3).
  const Region strip = random_resized_region(spec, 2, 100, Philox(7, 0));
  EXPECT_EQ(std::make_tuple(strip.top, strip.left, strip.height, strip.width),
            std::make_tuple(0, 48, 2, 3));
}

// The whole image at its own size is itself; a flat image stays flat at any size (the filter's
// weights sum to 1); a flip mirrors the result.
TEST(RandomResizedCrop, ResizesTheRegionWithAFilterThatKeepsLevels) {
  const Shape shape{1, 4, 6};
  std::vector<uint8_t> pixels(24);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(10 * i);
  TransformSpec whole = random_resized_crop_transform(4, 6);
  whole.min_area = whole.max_area = 1;
  whole.min_ratio = whole.max_ratio = 1.5f;
  whole.random_flip = false;
  whole.scale = 1;
  std::vector<float> out(24);
  apply_transform(whole, pixels.data(), shape, Philox(1, 2), out.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(out[i], pixels[i]) << i;

  const std::vector<uint8_t> flat(3 * 37 * 41, 90);
  const TransformSpec spec = random_resized_crop_transform(32, 32);
  std::vector<float> small(3 * 32 * 32);
  for (uint64_t example = 0; example < 20; ++example) {
    apply_transform(spec, flat.data(), Shape{3, 37, 41}, Philox(3, example), small.data());
    for (float v : small) ASSERT_NEAR(v, 90 / 255.0f, 1e-5f);
  }
  EXPECT_EQ(transform_output_shape(spec, Shape{3, 37, 41}), (Shape{3, 32, 32}));

  TransformSpec flipped = whole;
  flipped.random_flip = true;
  for (uint64_t example = 0; example < 8; ++example) {
    apply_transform(flipped, pixels.data(), shape, Philox(1, example), out.data());
    const bool mirrored = out[0] == pixels[5];
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 6; ++x)
        EXPECT_FLOAT_EQ(out[y * 6 + x], pixels[y * 6 + (mirrored ? 5 - x : x)]);
  }
}

}  // namespace
}  // namespace tower
