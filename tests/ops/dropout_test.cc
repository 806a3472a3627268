#include "tower/ops/dropout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "testing/gradient_check.h"
#include "testing/reference_math.h"

// Tolerance of the gradient check: dropout is linear with a fixed mask at a fixed step, so only
// float rounding remains (2e-3 relative).

namespace tower {
namespace {

using testing::error_of;
using testing::random_tensor;

Tensor filled(Shape shape, float value) {
  Tensor t(std::move(shape), DType::f32);
  std::fill_n(t.data<float>(), t.numel(), value);
  return t;
}

TEST(DropoutTest, KeepsAboutKeepProbAndScalesKeptValues) {
  Graph g;
  g.seed = 7;
  Scope s(g);
  Tensor x = random_tensor(Shape{100003}, 1, 0.5f, 1.0f);
  Value px = s.placeholder("x", x.shape());
  auto out = testing::evaluate(g, {ops::dropout(s, px, 0.3f)}, {{px, &x}}, 2);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float y = out[0].data<float>()[i];
    if (y == 0.0f) continue;
    ++kept;
    EXPECT_FLOAT_EQ(y, x.data<float>()[i] * (1.0f / 0.3f)) << i;
  }
  // Binomial(100003, 0.3): standard deviation ~145 elements; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(kept), 0.3 * 100003, 5 * 145.0);
}

TEST(DropoutTest, MaskChangesPerStepRepeatsAcrossRunsAndGradientReusesIt) {
  Graph g;
  g.seed = 11;
  Scope s(g);
  Value px = s.placeholder("x", Shape{2, 501});
  Value dy = s.placeholder("dy", px.shape());
  Value y = ops::dropout(s, px, 0.5f);
  Value other = ops::dropout(s, px, 0.5f);
  Value salted = ops::dropout(s, px, 0.5f, 1);
  Value dx = gradients(s, {y}, {px}, {dy})[0];
  Tensor ones = filled(px.shape(), 1.0f);
  VariableStore variables;
  auto run = [&](int threads, uint64_t step) {
    Program program(g, {y, dx, other, salted}, variables, {Device{}, threads});
    program.input(px).copy_from(ones);
    program.input(dy).copy_from(ones);
    program.run(step);
    std::vector<std::vector<float>> result;
    for (int i = 0; i < 4; ++i) result.push_back(program.output(i).to_vector<float>());
    return result;
  };
  auto step0 = run(1, 0);
  EXPECT_EQ(step0[0], step0[1]) << "DropoutGrad must regenerate the forward mask";
  EXPECT_NE(step0[0], step0[2]) << "two dropout ops must draw different masks";
  EXPECT_NE(step0[0], step0[3]) << "the salt must change the mask";
  EXPECT_EQ(run(2, 0), step0) << "the mask must not depend on the thread count or the run";
  auto step1 = run(1, 1);
  EXPECT_NE(step1[0], step0[0]) << "the mask must change from step to step";
  EXPECT_EQ(step1[0], step1[1]);
}

TEST(DropoutTest, Gradient) {
  testing::check_gradients(
      [](const Scope& s, const std::vector<Value>& in) { return ops::dropout(s, in[0], 0.6f); },
      testing::tensors(random_tensor(Shape{3, 7, 5}, 2)), {.tolerance = 2e-3});
}

TEST(DropoutTest, KeepProbOneIsIdentityAndBadKeepProbIsAnError) {
  Graph g;
  Scope s(g);
  Tensor x = random_tensor(Shape{9, 3}, 3);
  Value px = s.placeholder("x", x.shape());
  auto out = testing::evaluate(g, {ops::dropout(s, px, 1.0f)}, {{px, &x}});
  EXPECT_EQ(out[0].to_vector<float>(), x.to_vector<float>());
  for (float bad : {0.0f, -0.5f, 1.5f, NAN}) {
    std::string msg = error_of([&] { ops::dropout(s, px, bad); });
    EXPECT_NE(msg.find("(Dropout)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("keep_prob must be in (0, 1]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tower
