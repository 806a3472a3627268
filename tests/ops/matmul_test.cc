#include "tower/ops/matmul.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "testing/gradient_check.h"
#include "testing/reference_math.h"

// Tolerances. Forward against the double reference: rtol 1e-4 plus atol 1e-5 * K (float products
// summed in float by oneDNN, with |entries| <= 1). Gradients: the loss is bilinear, so central
// differences are exact up to float rounding of the outputs; 2e-3 relative.

namespace tower {
namespace {

using ops::Transpose;
using testing::check_gradients;
using testing::error_of;
using testing::evaluate;
using testing::random_tensor;

struct Dims {
  int64_t m, k, n;
};

Shape a_shape(Dims d, Transpose ta) {
  return ta == Transpose::yes ? Shape{d.k, d.m} : Shape{d.m, d.k};
}
Shape b_shape(Dims d, Transpose tb) {
  return tb == Transpose::yes ? Shape{d.n, d.k} : Shape{d.k, d.n};
}

const Transpose kBoth[] = {Transpose::no, Transpose::yes};

TEST(MatMulTest, ForwardMatchesReferenceForAllTransposes) {
  for (Dims d : {Dims{7, 13, 5}, Dims{1, 1, 1}, Dims{64, 129, 33}, Dims{3, 200, 1}})
    for (Transpose ta : kBoth)
      for (Transpose tb : kBoth) {
        SCOPED_TRACE(fmt::format("m={} k={} n={} ta={} tb={}", d.m, d.k, d.n, ta == Transpose::yes,
                                 tb == Transpose::yes));
        Graph g;
        Scope s(g);
        Tensor a = random_tensor(a_shape(d, ta), 1), b = random_tensor(b_shape(d, tb), 2);
        Value pa = s.placeholder("a", a.shape()), pb = s.placeholder("b", b.shape());
        Value y = ops::matmul(s, pa, pb, ta, tb);
        EXPECT_EQ(y.shape(), (Shape{d.m, d.n}));
        auto out = evaluate(g, {y}, {{pa, &a}, {pb, &b}}, 2);
        testing::expect_close(out[0],
                              testing::ref_matmul(a, b, ta == Transpose::yes, tb == Transpose::yes),
                              1e-4, 1e-5 * static_cast<double>(d.k));
      }
}

TEST(MatMulTest, GradientsForAllTransposes) {
  for (Dims d : {Dims{3, 5, 4}, Dims{1, 7, 2}, Dims{6, 1, 3}})
    for (Transpose ta : kBoth)
      for (Transpose tb : kBoth) {
        SCOPED_TRACE(fmt::format("m={} k={} n={} ta={} tb={}", d.m, d.k, d.n, ta == Transpose::yes,
                                 tb == Transpose::yes));
        check_gradients(
            [ta, tb](const Scope& s, const std::vector<Value>& in) {
              return ops::matmul(s, in[0], in[1], ta, tb);
            },
            testing::tensors(random_tensor(a_shape(d, ta), 3), random_tensor(b_shape(d, tb), 4)),
            {.tolerance = 2e-3});
      }
}

TEST(MatMulTest, EmptyInnerDimensionGivesZeros) {
  Graph g;
  Scope s(g);
  Tensor a(Shape{3, 0}, DType::f32), b(Shape{0, 4}, DType::f32);
  Value pa = s.placeholder("a", a.shape()), pb = s.placeholder("b", b.shape());
  Value pe = s.placeholder("e", Shape{0, 5});
  Tensor e(Shape{0, 5}, DType::f32), w = random_tensor(Shape{5, 2}, 1);
  Value pw = s.placeholder("w", w.shape());
  auto out = evaluate(g, {ops::matmul(s, pa, pb), ops::matmul(s, pe, pw)},
                      {{pa, &a}, {pb, &b}, {pe, &e}, {pw, &w}});
  EXPECT_EQ(out[0].to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(out[1].shape(), (Shape{0, 2}));
}

TEST(MatMulTest, ShapeErrorsNameTheOpAndInputs) {
  Graph g;
  Scope s(g);
  Value a = s.placeholder("a", Shape{2, 3}), b = s.placeholder("b", Shape{4, 5});
  std::string msg = error_of([&] { ops::matmul(s, a, b); });
  EXPECT_NE(msg.find("(MatMul)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inner dimensions differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a f32(2, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b f32(4, 5)"), std::string::npos) << msg;
  Value c = s.placeholder("c", Shape{4, 3});
  EXPECT_EQ(error_of([&] { ops::matmul(s, a, c, Transpose::no, Transpose::yes); }), "");
  Value v = s.placeholder("v", Shape{3});
  msg = error_of([&] { ops::matmul(s, a, v); });
  EXPECT_NE(msg.find("must have rank 2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tower
