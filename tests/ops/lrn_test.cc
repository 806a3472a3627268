#include "tower/ops/lrn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradient_check.h"
#include "testing/reference_nn.h"

namespace tower {
namespace {

using ops::LRNAttrs;
using testing::random_tensor;

struct LRNCase {
  Shape x;
  LRNAttrs attrs;
};

// The CIFAR-10 model's settings, a window wider than the channels, radius 0, and a large alpha
// (where alpha's scaling matters most).
const LRNCase kCases[] = {
    {{2, 7, 3, 5}, {4, 1.0f, 0.001f / 9.0f, 0.75f}},
    {{1, 3, 4, 4}, {5, 1.0f, 1.0f, 0.5f}},
    {{2, 5, 3, 3}, {0, 2.0f, 0.5f, 0.75f}},
    {{3, 9, 2, 5}, {2, 1.0f, 0.5f, 0.75f}},
};

TEST(LRNTest, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const LRNCase& c : kCases) {
    Tensor x = random_tensor(c.x, seed++, -2.0f, 2.0f);
    Tensor y = testing::run_graph(
        [&](const Scope& s, const std::vector<Value>& in) { return ops::lrn(s, in[0], c.attrs); },
        {&x});
    EXPECT_LE(testing::max_relative_error(y, testing::lrn_reference(x, c.attrs)), 1e-5)
        << c.x.to_string() << " radius " << c.attrs.depth_radius;
  }
}

// The TensorFlow formula written out for one element: alpha is not divided by the window size.
TEST(LRNTest, AlphaIsNotDividedByTheWindow) {
  Tensor x = Tensor::from_vector<float>(Shape{1, 3, 1, 1}, {1.0f, 2.0f, 3.0f});
  LRNAttrs a{1, 1.0f, 0.1f, 0.75f};
  Tensor y = testing::run_graph(
      [&](const Scope& s, const std::vector<Value>& in) { return ops::lrn(s, in[0], a); }, {&x});
  const float* p = y.data<float>();
  EXPECT_NEAR(p[0], 1.0 / std::pow(1.0 + 0.1 * (1 + 4), 0.75), 1e-6);
  EXPECT_NEAR(p[1], 2.0 / std::pow(1.0 + 0.1 * (1 + 4 + 9), 0.75), 1e-6);
  EXPECT_NEAR(p[2], 3.0 / std::pow(1.0 + 0.1 * (4 + 9), 0.75), 1e-6);
}

// Smooth op; f32 central differences with eps 1e-3 stay within 1e-3 relative, checked at 1e-2.
TEST(LRNTest, GradientsMatchFiniteDifferences) {
  uint64_t seed = 100;
  for (const LRNCase& c : kCases) {
    SCOPED_TRACE(c.x.to_string() + " radius " + std::to_string(c.attrs.depth_radius));
    testing::check_gradients(
        [&](const Scope& s, const std::vector<Value>& in) { return ops::lrn(s, in[0], c.attrs); },
        testing::tensor_list(random_tensor(c.x, seed++, -2.0f, 2.0f)), {.tolerance = 1e-2});
  }
}

TEST(LRNTest, ShapeErrorsNameTheOp) {
  Graph graph;
  Scope scope(graph);
  Value flat = scope.placeholder("flat", Shape{2, 48});
  Value x = scope.placeholder("images", Shape{2, 3, 4, 4});
  auto expect_error = [](auto f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("LRN"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error([&] { ops::lrn(scope, flat); }, "rank 4");
  expect_error([&] { ops::lrn(scope, x, {-1, 1.0f, 1.0f, 0.5f}); }, "depth_radius");
  expect_error([&] { ops::lrn(scope, x, {2, 0.0f, 1.0f, 0.5f}); }, "bias");
}

}  // namespace
}  // namespace tower
