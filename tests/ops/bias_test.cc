#include "tower/ops/bias.h"

#include <gtest/gtest.h>

#include "testing/gradient_check.h"
#include "testing/reference_nn.h"

namespace tower {
namespace {

using testing::random_tensor;

const Shape kShapes[] = {{3, 5, 7, 9}, {1, 1, 1, 1}, {4, 7}, {5, 1}};

TEST(BiasAddTest, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const Shape& shape : kShapes) {
    Tensor x = random_tensor(shape, seed++);
    Tensor b = random_tensor(Shape{shape[1]}, seed++);
    Tensor y = testing::run_graph(
        [](const Scope& s, const std::vector<Value>& in) { return ops::bias_add(s, in[0], in[1]); },
        {&x, &b});
    EXPECT_EQ(testing::max_relative_error(y, testing::bias_add_reference(x, b)), 0.0)
        << shape.to_string();
  }
}

TEST(BiasAddTest, GradSumsAllButTheChannelAxis) {
  Tensor dy = random_tensor(Shape{3, 4, 5, 7}, 5);
  Tensor db = testing::run_graph(
      [](const Scope& s, const std::vector<Value>& in) { return ops::bias_add_grad(s, in[0]); },
      {&dy});
  ASSERT_EQ(db.shape(), Shape{4});
  const float* p = dy.data<float>();
  for (int64_t c = 0; c < 4; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 35; ++i) sum += p[(n * 4 + c) * 35 + i];
    EXPECT_NEAR(db.data<float>()[c], sum, 1e-5) << "channel " << c;
  }
}

// Linear op: differences are exact up to f32 rounding of the loss.
TEST(BiasAddTest, GradientsMatchFiniteDifferences) {
  uint64_t seed = 10;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.to_string());
    testing::check_gradients(
        [](const Scope& s, const std::vector<Value>& in) { return ops::bias_add(s, in[0], in[1]); },
        testing::tensor_list(random_tensor(shape, seed), random_tensor(Shape{shape[1]}, seed + 1)),
        {.tolerance = 5e-3});
    seed += 2;
  }
}

TEST(BiasAddTest, ShapeErrorsNameTheOp) {
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("x", Shape{2, 3, 4, 4});
  Value x3 = scope.placeholder("x3", Shape{2, 3, 4});
  Value b = scope.placeholder("bias", Shape{4});
  Value b3 = scope.placeholder("bias3", Shape{3});
  for (auto f : std::vector<std::function<void()>>{[&] { ops::bias_add(scope, x, b); },
                                                   [&] { ops::bias_add(scope, x3, b3); }}) {
    try {
      f();
      ADD_FAILURE() << "expected a shape error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BiasAdd"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tower
