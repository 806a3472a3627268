#include "tower/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tower/core/error.h"

namespace tower {
namespace {

std::unique_ptr<LrSchedule> parse(const std::string& spec, float lr = 0.1f,
                                  int64_t steps_per_epoch = 10, int64_t total_steps = 10000) {
  return parse_lr_schedule(spec, lr, steps_per_epoch, total_steps);
}

std::string error_of(const std::string& spec, float lr = 0.1f, int64_t total_steps = 10000) {
  try {
    parse(spec, lr, 10, total_steps);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(LrScheduleTest, Constant) {
  auto s = parse("constant", 0.25f);
  EXPECT_EQ(s->lr(0), 0.25f);
  EXPECT_EQ(s->lr(123456), 0.25f);
}

TEST(LrScheduleTest, ExponentialStaircaseIsTheClassicCifar10) {
  // 350 epochs of 10 steps: the rate drops tenfold every 3500 steps.
  auto s = parse("exponential:decay_epochs=350,rate=0.1,staircase=1", 0.1f);
  EXPECT_FLOAT_EQ(s->lr(0), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(3499), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(3500), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(6999), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(7000), 0.001f);
}

TEST(LrScheduleTest, ExponentialSmooth) {
  auto s = parse("exponential:decay_steps=100,rate=0.5", 0.1f);
  EXPECT_FLOAT_EQ(s->lr(0), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(50), 0.0707106781f);  // 0.1 * 0.5^0.5
  EXPECT_FLOAT_EQ(s->lr(100), 0.05f);
  EXPECT_FLOAT_EQ(s->lr(250), 0.0176776695f);  // 0.1 * 0.5^2.5
  auto t = parse("exponential:decay_steps=100,rate=0.5,staircase=0", 0.1f);
  EXPECT_EQ(t->lr(250), s->lr(250));
}

TEST(LrScheduleTest, PiecewiseConstantLikeTensorFlow) {
  auto s = parse("piecewise:boundaries=1000;2000,values=0.1;0.01;0.001");
  EXPECT_FLOAT_EQ(s->lr(0), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(1000), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(1001), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(2000), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(2001), 0.001f);
  EXPECT_FLOAT_EQ(s->lr(1000000), 0.001f);
  // In epochs of 10 steps: boundaries 30 and 60.
  auto e = parse("piecewise:boundary_epochs=3;6,values=1;0.5;0.25");
  EXPECT_FLOAT_EQ(e->lr(30), 1.0f);
  EXPECT_FLOAT_EQ(e->lr(31), 0.5f);
  EXPECT_FLOAT_EQ(e->lr(61), 0.25f);
}

TEST(LrScheduleTest, CosineWithWarmup) {
  // lr 1, 10 warm-up steps, 100 decay steps (110 in all).
  auto s = parse("cosine:warmup_steps=10,alpha=0", 1.0f, 10, 110);
  EXPECT_NEAR(s->lr(0), 0.0, 1e-7);
  EXPECT_NEAR(s->lr(5), 0.5, 1e-7);
  EXPECT_NEAR(s->lr(10), 1.0, 1e-7);
  EXPECT_NEAR(s->lr(35), 0.8535533906, 1e-7);  // (1 + cos(pi / 4)) / 2
  EXPECT_NEAR(s->lr(60), 0.5, 1e-7);
  EXPECT_NEAR(s->lr(110), 0.0, 1e-7);
  EXPECT_NEAR(s->lr(500), 0.0, 1e-7);
  // From 0.2, down to alpha = 0.1; 2 epochs of 10 steps of warm-up.
  auto t = parse("cosine:warmup_epochs=2,warmup_start=0.2,alpha=0.1", 1.0f, 10, 120);
  EXPECT_NEAR(t->lr(0), 0.2, 1e-7);
  EXPECT_NEAR(t->lr(10), 0.6, 1e-7);
  EXPECT_NEAR(t->lr(20), 1.0, 1e-7);
  EXPECT_NEAR(t->lr(70), 0.55, 1e-7);  // 0.1 + 0.9 * 0.5
  EXPECT_NEAR(t->lr(120), 0.1, 1e-7);
  // A warm-up longer than the run is clamped to half of it (with a warning), never an error.
  std::string warning;
  auto clamped = parse_lr_schedule("cosine:warmup_steps=50", 1.0f, 10, 5, &warning);
  EXPECT_NE(warning.find("warm-up of 50 steps is longer than the run (5 steps): warming up for 2"),
            std::string::npos)
      << warning;
  EXPECT_FLOAT_EQ(clamped->lr(0), 0.0f);
  EXPECT_FLOAT_EQ(clamped->lr(1), 0.5f);
  EXPECT_FLOAT_EQ(clamped->lr(2), 1.0f);
  EXPECT_LT(clamped->lr(4), clamped->lr(3));

  // No warm-up at all.
  auto u = parse("cosine", 2.0f, 10, 100);
  EXPECT_NEAR(u->lr(0), 2.0, 1e-7);
  EXPECT_NEAR(u->lr(50), 1.0, 1e-7);
}

TEST(LrScheduleTest, MalformedSpecsNameTheSpecAndWhatWasExpected) {
  auto expect_error = [](const std::string& spec, const std::string& part, float lr = 0.1f,
                         int64_t total = 10000) {
    const std::string m = error_of(spec, lr, total);
    EXPECT_NE(m.find(part), std::string::npos) << spec << " -> " << m;
  };
  expect_error("linear", "--lr_schedule 'linear': unknown schedule 'linear'; expected constant");
  expect_error("", "unknown schedule ''");
  expect_error("step:x", "unknown schedule 'step'");
  expect_error("exponential:rate=0.1", "exponential needs decay_steps= or decay_epochs=");
  expect_error("exponential:decay_steps=100", "exponential needs rate=");
  expect_error("exponential:decay_steps=10,rate=abc", "rate must be a number, got 'abc'");
  expect_error("exponential:decay_steps=10,rate=0.1,staircase=yes",
               "staircase must be 0 or 1, got 'yes'");
  expect_error("exponential:decay_steps=0,rate=0.1", "at least 1 step");
  expect_error("exponential:decay_steps=1.5,rate=0.1", "decay_steps must be a whole number");
  expect_error("exponential:decay_steps=10,decay_epochs=1,rate=0.1",
               "give decay_steps or decay_epochs, not both");
  expect_error("exponential:decay_steps", "'decay_steps' is not KEY=VALUE");
  expect_error("exponential:", "'' is not KEY=VALUE");
  expect_error("exponential:rate=0.1,rate=0.2", "key 'rate' is given twice");
  expect_error("exponential:decay_steps=10,rate=-1", "rate must be > 0");
  expect_error("piecewise:boundaries=1000;2000,values=0.1;0.01",
               "2 boundaries need 3 values, got 2");
  expect_error("piecewise:boundaries=2000;1000,values=1;2;3", "boundaries must strictly increase");
  expect_error("piecewise:boundaries=10;;20,values=1;2;3", "boundaries must be a number, got ''");
  expect_error("piecewise:values=1", "piecewise needs boundaries= or boundary_epochs=");
  expect_error("cosine:warmup=5",
               "unknown key 'warmup' for cosine; valid keys: warmup_steps, warmup_epochs, "
               "warmup_start, alpha");
  expect_error("cosine:alpha=2", "alpha must be in [0, 1]");
  expect_error("constant:lr=1", "--lr_schedule 'constant:lr=1': constant takes no keys");
  expect_error("constant", "--lr must be a positive number, got 0", 0.0f);
  expect_error("constant", "--lr must be a positive number, got nan", NAN);
}

// --lr moves a recipe's piecewise schedule by scaling its values; other specs are left alone.
TEST(LrScheduleTest, PiecewiseValuesScaleWithTheLearningRate) {
  EXPECT_EQ(scale_piecewise_values("piecewise:boundary_epochs=82;123,values=0.1;0.01;0.001", 0.5),
            "piecewise:boundary_epochs=82;123,values=0.05;0.005;0.0005");
  EXPECT_EQ(scale_piecewise_values("piecewise:values=0.2;0.02,boundaries=10", 2),
            "piecewise:values=0.4;0.04,boundaries=10");
  EXPECT_EQ(scale_piecewise_values("cosine:warmup_steps=50", 3), "cosine:warmup_steps=50");
  auto s = parse_lr_schedule(scale_piecewise_values("piecewise:boundaries=10,values=0.1;0.01", 0.5),
                             0.05f, 1, 100);
  EXPECT_FLOAT_EQ(s->lr(0), 0.05f);
  EXPECT_FLOAT_EQ(s->lr(11), 0.005f);
}

// A recipe's schedule written in epochs keeps its boundaries at the same fractions of a run of
// another length; steps, warm-ups and values stay.
TEST(LrScheduleTest, RecipeEpochsScaleToTheRun) {
  const std::string resnet = "piecewise:boundary_epochs=82;123,values=0.1;0.01;0.001";
  EXPECT_EQ(scale_schedule_epochs(resnet, 25.0 / 164),
            "piecewise:boundary_epochs=12.5;18.75,values=0.1;0.01;0.001");
  EXPECT_EQ(scale_schedule_epochs("exponential:decay_epochs=350,rate=0.1,staircase=1", 0.5),
            "exponential:decay_epochs=175,rate=0.1,staircase=1");
  EXPECT_EQ(scale_schedule_epochs("exponential:rate=0.5,decay_epochs=4", 0.25),
            "exponential:rate=0.5,decay_epochs=1");
  for (const std::string unchanged :
       {"piecewise:boundaries=100;200,values=0.1;0.01;0.001", "cosine:warmup_epochs=5", "constant",
        "exponential:decay_steps=100,rate=0.5"})
    EXPECT_EQ(scale_schedule_epochs(unchanged, 0.1), unchanged);
  // 25 epochs of 6 steps: x0.1 after step 75 and after step 112.
  auto s = parse_lr_schedule(scale_schedule_epochs(resnet, 25.0 / 164), 0.1f, 6, 150);
  EXPECT_FLOAT_EQ(s->lr(75), 0.1f);
  EXPECT_FLOAT_EQ(s->lr(76), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(112), 0.01f);
  EXPECT_FLOAT_EQ(s->lr(113), 0.001f);
}

// A schedule that would change the rate only after the run's last step says so.
TEST(LrScheduleTest, DecaysPastTheRunAreSaid) {
  std::string warning;
  parse_lr_schedule("piecewise:boundary_epochs=82;123,values=0.1;0.01;0.001", 0.1f, 6, 150,
                    &warning);
  EXPECT_NE(warning.find("boundary 1 (step 492) is past the run's last step 149: the learning "
                         "rate stays 0.1 to the end"),
            std::string::npos)
      << warning;
  warning.clear();
  parse_lr_schedule("piecewise:boundaries=100;200,values=0.1;0.01;0.001", 0.1f, 6, 150, &warning);
  EXPECT_NE(warning.find("boundary 2 (step 200) is past the run's last step 149: the learning "
                         "rate stays 0.01"),
            std::string::npos)
      << warning;
  warning.clear();
  parse_lr_schedule("exponential:decay_steps=200,rate=0.1,staircase=1", 0.1f, 6, 150, &warning);
  EXPECT_NE(warning.find("the first decay comes after 200 steps, but the run has 150"),
            std::string::npos)
      << warning;
  // One that changes the rate within the run says nothing.
  warning.clear();
  parse_lr_schedule("piecewise:boundaries=100;147,values=0.1;0.01;0.001", 0.1f, 6, 150, &warning);
  parse_lr_schedule("exponential:decay_steps=200,rate=0.1", 0.1f, 6, 150, &warning);
  EXPECT_EQ(warning, "");
}

}  // namespace
}  // namespace tower
