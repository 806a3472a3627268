#include "tower/train/clip.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tower {
namespace {

TEST(ClipTest, BelowTheThresholdNothingChanges) {
  // Global norm of (3, 4) and (12) is sqrt(9 + 16 + 144) = 13.
  Tensor a = Tensor::from_vector<float>(Shape{2}, {3, 4});
  Tensor b = Tensor::from_vector<float>(Shape{1, 1}, {12});
  EXPECT_FLOAT_EQ(clip_by_global_norm({&a, &b}, 20.0f), 13.0f);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{12}));
  EXPECT_FLOAT_EQ(clip_by_global_norm({&a, &b}, 13.0f), 13.0f);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{12}));
}

TEST(ClipTest, AboveTheThresholdScalesToMaxNorm) {
  Tensor a = Tensor::from_vector<float>(Shape{2}, {3, 4});
  Tensor b = Tensor::from_vector<float>(Shape{1}, {-12});
  EXPECT_FLOAT_EQ(clip_by_global_norm({&a, &b}, 6.5f), 13.0f);  // scale 6.5 / 13 = 0.5
  EXPECT_FLOAT_EQ(a.data<float>()[0], 1.5f);
  EXPECT_FLOAT_EQ(a.data<float>()[1], 2.0f);
  EXPECT_FLOAT_EQ(b.data<float>()[0], -6.0f);
  EXPECT_NEAR(global_norm({&a, &b}), 6.5, 1e-6);
}

TEST(ClipTest, NormIsSummedInDouble) {
  // The sum of squares, 9 * 3000001 = 27000009, is past 2^24: a float sum would round it.
  const int64_t n = 3000001;
  Tensor a(Shape{n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = 3.0f;
  Tensor empty(Shape{0}, DType::f32);
  EXPECT_EQ(global_norm({&a, &empty}), std::sqrt(27000009.0));
}

TEST(ClipTest, ZeroGradientsStayZero) {
  Tensor a(Shape{3}, DType::f32);
  EXPECT_EQ(clip_by_global_norm({&a}, 1.0f), 0.0f);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(ClipTest, NonFiniteNormPoisonsEveryGradient) {
  Tensor a = Tensor::from_vector<float>(Shape{2}, {1, INFINITY});
  Tensor b = Tensor::from_vector<float>(Shape{1}, {2});
  EXPECT_TRUE(std::isinf(clip_by_global_norm({&a, &b}, 1.0f)));
  EXPECT_TRUE(std::isnan(a.data<float>()[0]));
  EXPECT_TRUE(std::isnan(b.data<float>()[0]));
}

TEST(ClipTest, MaxNormMustBePositive) {
  Tensor a = Tensor::from_vector<float>(Shape{1}, {1});
  try {
    clip_by_global_norm({&a}, 0.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--clip_norm must be a positive number, got 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(clip_by_global_norm({&a}, NAN), Error);
}

}  // namespace
}  // namespace tower
