#include "tower/train/ema.h"

#include <gtest/gtest.h>

namespace tower {
namespace {

TEST(EmaTest, DecayFollowsNumUpdates) {
  ExponentialMovingAverage ema(0.9999f);
  EXPECT_NEAR(ema.decay_at(0), 0.1, 1e-7);  // (1 + 0) / (10 + 0)
  EXPECT_NEAR(ema.decay_at(1), 2.0 / 11.0, 1e-7);
  EXPECT_NEAR(ema.decay_at(90), 0.91, 1e-7);          // 91 / 100
  EXPECT_NEAR(ema.decay_at(10000000), 0.9999, 1e-7);  // capped by decay
  ExponentialMovingAverage half(0.5f);
  EXPECT_FLOAT_EQ(half.decay_at(100), 0.5f);
  EXPECT_NEAR(half.decay_at(5), 0.4, 1e-7);  // 6 / 15
}

TEST(EmaTest, ShadowsFollowTheVariables) {
  Tensor w = Tensor::from_vector<float>(Shape{2}, {1, 10});
  ExponentialMovingAverage ema(0.9999f);
  ema.init({{"w", &w}});
  EXPECT_EQ(ema.shadow("w").to_vector<float>(), (std::vector<float>{1, 10}));
  // update(1): d = 2 / 11, shadow = 1 - (1 - 2) * 9 / 11 = 20 / 11 and 10 - (10 - 0) * 9 / 11
  // = 20 / 11.
  w.data<float>()[0] = 2;
  w.data<float>()[1] = 0;
  ema.update(1);
  EXPECT_NEAR(ema.shadow("w").data<float>()[0], 20.0 / 11.0, 1e-6);
  EXPECT_NEAR(ema.shadow("w").data<float>()[1], 20.0 / 11.0, 1e-6);
  // update(2): d = 3 / 12, shadow = 20/11 + (3 - 20/11) * 3/4.
  w.data<float>()[0] = 3;
  ema.update(2);
  EXPECT_NEAR(ema.shadow("w").data<float>()[0], 20.0 / 11.0 + (3 - 20.0 / 11.0) * 0.75, 1e-6);
  EXPECT_NEAR(ema.shadow("w").data<float>()[1], 20.0 / 11.0 * 0.25, 1e-6);
}

TEST(EmaTest, InitCopiesTheValues) {
  Tensor w = Tensor::from_vector<float>(Shape{1}, {1});
  ExponentialMovingAverage ema;
  ema.init({{"w", &w}});
  w.data<float>()[0] = 5;
  EXPECT_EQ(ema.shadow("w").data<float>()[0], 1.0f);
}

TEST(EmaTest, ShadowsAreNamedForCheckpoints) {
  Tensor a = Tensor::from_vector<float>(Shape{1}, {1});
  Tensor b = Tensor::from_vector<float>(Shape{2}, {2, 3});
  ExponentialMovingAverage ema;
  ema.init({{"conv1/weights", &a}, {"conv1/biases", &b}});
  auto shadows = ema.shadows();
  ASSERT_EQ(shadows.size(), 2u);
  EXPECT_EQ(shadows[0].first, "conv1/weights/ExponentialMovingAverage");
  EXPECT_EQ(shadows[1].first, "conv1/biases/ExponentialMovingAverage");
  // Restoring writes through the pointers.
  shadows[1].second->data<float>()[1] = 7;
  EXPECT_EQ(ema.shadow("conv1/biases").data<float>()[1], 7.0f);
  EXPECT_TRUE(ema.has("conv1/weights"));
  EXPECT_FALSE(ema.has("conv1/weights/ExponentialMovingAverage"));
  EXPECT_THROW(ema.shadow("fc/weights"), Error);
}

TEST(EmaTest, UpdateAllocatesNothing) {
  Tensor w(Shape{100}, DType::f32);
  ExponentialMovingAverage ema;
  ema.init({{"w", &w}});
  const int64_t before = allocator_for(Device{}).counters().num_allocations;
  for (int64_t s = 1; s <= 3; ++s) ema.update(s);
  EXPECT_EQ(allocator_for(Device{}).counters().num_allocations, before);
}

TEST(EmaTest, DecayOutsideUnitIntervalIsAnError) {
  try {
    ExponentialMovingAverage ema(1.5f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ema_decay must be in [0, 1], got 1.5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ExponentialMovingAverage(-0.1f), Error);
}

}  // namespace
}  // namespace tower
