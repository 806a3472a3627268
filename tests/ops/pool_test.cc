#include "tower/ops/pool.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "testing/gradient_check.h"
#include "testing/reference_nn.h"

namespace tower {
namespace {

using ops::Padding;
using ops::PoolAttrs;
using testing::random_tensor;

struct PoolCase {
  Shape x;
  PoolAttrs attrs;
};

// Windows that overlap, that skip pixels, and SAME padding on both or only one side.
const PoolCase kCases[] = {
    {{2, 3, 7, 9}, {{2, 2}, {2, 2}, Padding::valid}},
    {{2, 3, 7, 9}, {{3, 3}, {2, 2}, Padding::same}},
    {{1, 2, 8, 5}, {{3, 3}, {2, 2}, Padding::same}},
    {{2, 2, 9, 7}, {{3, 2}, {1, 3}, Padding::same}},
    {{1, 4, 6, 6}, {{2, 2}, {3, 3}, Padding::valid}},
    {{3, 1, 5, 5}, {{5, 5}, {1, 1}, Padding::same}},
    // Whole channel blocks: pooled in nChw8c (nChw16c with AVX-512), MaxPoolGrad's own loop.
    {{2, 16, 7, 9}, {{3, 3}, {2, 2}, Padding::same}},
    {{1, 24, 6, 5}, {{2, 2}, {1, 1}, Padding::valid}},
    // Windows side by side that cover the plane: MaxPoolGrad writes dx without zeroing it first.
    {{2, 16, 8, 6}, {{2, 2}, {2, 2}, Padding::valid}},
    {{1, 32, 4, 6}, {{2, 2}, {2, 2}, Padding::same}},
    // Given pads on both sides (torchvision's 3x3 stride-2 max pooling with padding 1), plain
    // and in channel blocks, the last window short of the end.
    {{2, 3, 8, 9}, {{3, 3}, {2, 2}, Padding::given, {1, 1}}},
    {{2, 16, 8, 7}, {{3, 3}, {2, 2}, Padding::given, {1, 1}}},
    {{1, 16, 6, 6}, {{2, 3}, {1, 2}, Padding::given, {1, 0}}},
};

Value pool(const Scope& s, Value x, const PoolAttrs& a, bool is_max) {
  return is_max ? ops::max_pool(s, x, a) : ops::avg_pool(s, x, a);
}

TEST(PoolTest, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (bool is_max : {true, false})
    for (const PoolCase& c : kCases) {
      Tensor x = random_tensor(c.x, seed++);
      Tensor y = testing::run_graph(
          [&](const Scope& s, const std::vector<Value>& in) {
            return pool(s, in[0], c.attrs, is_max);
          },
          {&x});
      Tensor expected = testing::pool_reference(x, c.attrs, is_max);
      ASSERT_EQ(y.shape(), expected.shape()) << c.x.to_string();
      EXPECT_LE(testing::max_relative_error(y, expected), 1e-6)
          << (is_max ? "max " : "avg ") << c.x.to_string();
    }
}

// TensorFlow semantics at the border: SAME average divides by the real elements only, and SAME
// max never returns the padding (all inputs negative).
TEST(PoolTest, SamePaddingIsExcluded) {
  Tensor x = Tensor::from_vector<float>(Shape{1, 1, 2, 2}, {-1, -2, -3, -4});
  PoolAttrs a{{3, 3}, {1, 1}, Padding::same};
  auto run = [&](bool is_max) {
    return testing::run_graph(
        [&](const Scope& s, const std::vector<Value>& in) { return pool(s, in[0], a, is_max); },
        {&x});
  };
  EXPECT_EQ(run(true).to_vector<float>(), (std::vector<float>{-1, -1, -1, -1}));
  EXPECT_EQ(run(false).to_vector<float>(), (std::vector<float>{-2.5f, -2.5f, -2.5f, -2.5f}));
}

// Max pooling is piecewise linear: with distinct inputs 0.01 apart and eps 1e-3 no argmax
// changes, so only f32 rounding of the loss remains (1e-2 relative is ample). Average pooling is
// linear.
TEST(PoolTest, GradientsMatchFiniteDifferences) {
  uint64_t seed = 100;
  for (bool is_max : {true, false})
    for (const PoolCase& c : kCases) {
      SCOPED_TRACE(std::string(is_max ? "max " : "avg ") + c.x.to_string());
      testing::check_gradients(
          [&](const Scope& s, const std::vector<Value>& in) {
            return pool(s, in[0], c.attrs, is_max);
          },
          testing::tensor_list(testing::distinct_values(c.x, seed++)), {.tolerance = 1e-2});
    }
}

// Ties: the gradient goes to the first maximum of each window in row-major order (TensorFlow's
// argmax), overlapping windows adding up.
TEST(PoolTest, MaxPoolGradRoutesToTheFirstMaximum) {
  Tensor x = Tensor::from_vector<float>(Shape{1, 1, 3, 4}, std::vector<float>(12, 1.0f));
  Tensor dy = Tensor::from_vector<float>(Shape{1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  PoolAttrs a{{2, 2}, {1, 1}, Padding::valid};  // 3x4 -> 2x3 overlapping windows
  Tensor x3 = Tensor::from_vector<float>(Shape{1, 1, 3, 4}, {1, 1, 1, 1,  //
                                                             1, 1, 1, 1,  //
                                                             1, 1, 1, 9});
  auto dx = [&](const Tensor& input) {
    return testing::run_graph(
               [&](const Scope& s, const std::vector<Value>& in) {
                 return ops::max_pool_grad(s, in[0], in[1], a);
               },
               {&input, &dy})
        .to_vector<float>();
  };
  // Every window's first element is its top-left corner: (r, c) gets dy[r][c].
  EXPECT_EQ(dx(x), (std::vector<float>{1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0}));
  // The 9 wins the one window that holds it.
  EXPECT_EQ(dx(x3), (std::vector<float>{1, 2, 3, 0, 4, 5, 0, 0, 0, 0, 0, 6}));
  // The same in every channel of whole channel blocks (the blocked loop).
  for (int64_t channels : {16, 32}) {
    Tensor xs(Shape{1, channels, 3, 4}, DType::f32), dys(Shape{1, channels, 2, 3}, DType::f32);
    for (int64_t c = 0; c < channels; ++c) {
      std::copy_n(x3.data<float>(), 12, xs.data<float>() + c * 12);
      std::copy_n(dy.data<float>(), 6, dys.data<float>() + c * 6);
    }
    const std::vector<float> out = testing::run_graph(
                                       [&](const Scope& s, const std::vector<Value>& in) {
                                         return ops::max_pool_grad(s, in[0], in[1], a);
                                       },
                                       {&xs, &dys})
                                       .to_vector<float>();
    for (int64_t c = 0; c < channels; ++c)
      EXPECT_EQ(std::vector<float>(out.begin() + c * 12, out.begin() + (c + 1) * 12),
                (std::vector<float>{1, 2, 3, 0, 4, 5, 0, 0, 0, 0, 0, 6}))
          << "channel " << c << " of " << channels;
  }
}

// On a team of threads the pooling runs in chunks of rows that the threads take one at a time
// (64 rows: 4 chunks of 16): each window is computed as by one thread, so the bits are the same.
TEST(PoolTest, BatchChunksOnTwoThreadsGiveTheOneThreadBits) {
  const PoolAttrs a{{3, 3}, {2, 2}, Padding::same};
  for (int64_t channels : {16, 5})  // channel blocks, and plain NCHW
    for (bool is_max : {true, false}) {
      Tensor x = random_tensor(Shape{64, channels, 9, 9}, 11);
      auto run = [&](int threads) {
        return testing::run_graph(
            [&](const Scope& s, const std::vector<Value>& in) { return pool(s, in[0], a, is_max); },
            {&x}, threads);
      };
      const Tensor one = run(1), two = run(2);
      EXPECT_EQ(one.to_vector<float>(), two.to_vector<float>())
          << (is_max ? "max, " : "avg, ") << channels << " channels";
    }
}

// AvgPoolGrad is linear, with AvgPool as its gradient.
TEST(PoolTest, AvgPoolGradGradientMatchesFiniteDifferences) {
  PoolAttrs a{{3, 3}, {2, 2}, Padding::same};
  Shape x{2, 3, 7, 9};
  testing::check_gradients(
      [&](const Scope& s, const std::vector<Value>& in) {
        return ops::avg_pool_grad(s, in[0], x, a);
      },
      testing::tensor_list(random_tensor(Shape{2, 3, 4, 5}, 7)), {.tolerance = 1e-2});
}

TEST(PoolTest, ShapeErrorsNameTheOp) {
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("images", Shape{2, 3, 4, 4});
  Value flat = scope.placeholder("flat", Shape{2, 48});
  auto expect_error = [](auto f, const std::string& op, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected a shape error mentioning " << needle;
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(op), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error([&] { ops::max_pool(scope, flat); }, "MaxPool", "rank 4");
  expect_error(
      [&] {
        ops::avg_pool(scope, x, {{5, 5}, {1, 1}, Padding::valid});
      },
      "AvgPool", "VALID");
  expect_error(
      [&] {
        ops::max_pool(scope, x, {{0, 2}, {2, 2}, Padding::valid});
      },
      "MaxPool", "ksize");
  Value dy = scope.placeholder("dy", Shape{2, 3, 3, 3});
  expect_error([&] { ops::max_pool_grad(scope, x, dy, {}); }, "MaxPoolGrad", "gradient");
}

}  // namespace
}  // namespace tower
