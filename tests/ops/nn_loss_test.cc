#include "tower/ops/nn_loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradient_check.h"
#include "testing/reference_math.h"
#include "tower/ops/math.h"

// Tolerances. Forward: softmax and cross-entropy compute exp in float and sums in double, so
// rtol 1e-5 (atol 1e-6 for probabilities near 0). Gradients: 5e-3 relative; with logits in
// [-2, 2] the central-difference truncation error (eps^2 * f''') is ~1e-6, the rest is float
// rounding of the loss (~1e-4).

namespace tower {
namespace {

using testing::check_gradients;
using testing::error_of;
using testing::evaluate;
using testing::expect_close;
using testing::random_tensor;
using Inputs = std::vector<Value>;

Tensor labels_tensor(const std::vector<int32_t>& labels) {
  return Tensor::from_vector<int32_t>(Shape{static_cast<int64_t>(labels.size())}, labels);
}

TEST(NnLossTest, CrossEntropyMatchesReference) {
  Tensor logits = random_tensor(Shape{7, 11}, 1, -3.0f, 3.0f);
  Tensor labels = labels_tensor({0, 10, 5, 3, 3, 9, 1});
  Graph g;
  Scope s(g);
  Value pl = s.placeholder("logits", logits.shape());
  Value py = s.placeholder("labels", labels.shape(), DType::i32);
  Value loss = ops::sparse_softmax_cross_entropy_with_logits(s, pl, py);
  EXPECT_EQ(loss.shape(), Shape{7});
  auto out = evaluate(g, {loss}, {{pl, &logits}, {py, &labels}});
  expect_close(out[0], testing::ref_sparse_xent(logits, labels), 1e-5, 1e-6);
}

TEST(NnLossTest, CrossEntropyIsFiniteForHugeLogits) {
  Tensor logits = Tensor::from_vector<float>(
      Shape{4, 3}, {1e30f, -1e30f, 0.0f,       // label 0: ~0
                    1e4f, 1e4f, 1e4f,          // uniform: log 3
                    -1e4f, 0.0f, 3e38f,        // label 1: 3e38
                    -3e38f, -3e38f, -3e38f});  // all equal and huge negative: log 3
  Tensor labels = labels_tensor({0, 2, 1, 1});
  Graph g;
  Scope s(g);
  Value pl = s.placeholder("logits", logits.shape());
  Value py = s.placeholder("labels", labels.shape(), DType::i32);
  Value loss = ops::sparse_softmax_cross_entropy_with_logits(s, pl, py);
  Value dy = s.placeholder("dy", loss.shape());
  Tensor ones = Tensor::from_vector<float>(Shape{4}, {1, 1, 1, 1});
  Value grad = gradients(s, {loss}, {pl}, {dy})[0];
  auto out = evaluate(g, {loss, grad}, {{pl, &logits}, {py, &labels}, {dy, &ones}});
  std::vector<float> l = out[0].to_vector<float>();
  EXPECT_FLOAT_EQ(l[0], 0.0f);
  EXPECT_NEAR(l[1], std::log(3.0f), 1e-6);
  EXPECT_FLOAT_EQ(l[2], 3e38f);
  EXPECT_NEAR(l[3], std::log(3.0f), 1e-6);
  for (float v : out[1].to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
  std::vector<float> d = out[1].to_vector<float>();
  EXPECT_NEAR(d[3 + 0], 1.0f / 3, 1e-6);
  EXPECT_NEAR(d[3 + 2], 1.0f / 3 - 1, 1e-6);
  EXPECT_NEAR(d[6 + 1], -1.0f, 1e-6);
  EXPECT_NEAR(d[6 + 2], 1.0f, 1e-6);
}

TEST(NnLossTest, CrossEntropyGradient) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {1, 1}, {3, 2}, {9, 13}}) {
    SCOPED_TRACE(fmt::format("N={} K={}", n, k));
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>((i * 5 + 3) % k));
    check_gradients(
        [](const Scope& s, const Inputs& in) {
          return ops::sparse_softmax_cross_entropy_with_logits(s, in[0], in[1]);
        },
        testing::tensors(random_tensor(Shape{n, k}, 2, -2.0f, 2.0f), labels_tensor(labels)),
        {.tolerance = 5e-3, .no_grad = {1}});
  }
}

// Label smoothing e and class weights w, against the definition computed in double:
// w[y] * (logsumexp(z) - sum_j ((1 - e) [j == y] + e / K) z_j).
TEST(NnLossTest, SmoothedWeightedCrossEntropyMatchesItsDefinition) {
  const int64_t n = 5, k = 4;
  Tensor logits = random_tensor(Shape{n, k}, 3, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {0, 3, 1, 3, 2};
  Tensor label_tensor = labels_tensor(labels);
  const ops::SoftmaxCrossEntropyAttrs attrs{.label_smoothing = 0.1f,
                                            .class_weights = {0.5f, 2.0f, 1.0f, 4.0f}};
  Graph g;
  Scope s(g);
  Value pl = s.placeholder("logits", logits.shape());
  Value py = s.placeholder("labels", label_tensor.shape(), DType::i32);
  Value loss = ops::sparse_softmax_cross_entropy_with_logits(s, pl, py, attrs);
  auto out = evaluate(g, {loss}, {{pl, &logits}, {py, &label_tensor}});
  const float* z = logits.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double lse = 0, expected = 0;
    for (int64_t j = 0; j < k; ++j) lse += std::exp(static_cast<double>(z[i * k + j]));
    lse = std::log(lse);
    for (int64_t j = 0; j < k; ++j)
      expected -= ((j == labels[i] ? 0.9 : 0.0) + 0.1 / k) * z[i * k + j];
    expected = attrs.class_weights[static_cast<size_t>(labels[i])] * (lse + expected);
    EXPECT_NEAR(out[0].data<float>()[i], expected, 1e-5 * std::abs(expected)) << i;
  }
  // A hand-computed row: logits (0, 0), label 0, e = 0.2, weight 3: 3 * (log 2 - 0) = 3 log 2
  // whatever e, since the logits are equal; the gradient is 3 * (1/2 - (0.8 + 0.1)) = -1.2 and
  // 3 * (1/2 - 0.1) = 1.2.
  Tensor even = Tensor::from_vector<float>(Shape{1, 2}, {0.0f, 0.0f});
  Tensor zero = labels_tensor({0});
  Graph g2;
  Scope s2(g2);
  Value pe = s2.placeholder("logits", even.shape());
  Value pz = s2.placeholder("labels", zero.shape(), DType::i32);
  Value l2 = ops::sparse_softmax_cross_entropy_with_logits(
      s2, pe, pz, {.label_smoothing = 0.2f, .class_weights = {3.0f, 1.0f}});
  Value dy = s2.placeholder("dy", l2.shape());
  Tensor one = Tensor::from_vector<float>(Shape{1}, {1.0f});
  Value grad = gradients(s2, {l2}, {pe}, {dy})[0];
  auto o2 = evaluate(g2, {l2, grad}, {{pe, &even}, {pz, &zero}, {dy, &one}});
  EXPECT_NEAR(o2[0].data<float>()[0], 3 * std::log(2.0), 1e-6);
  EXPECT_NEAR(o2[1].data<float>()[0], -1.2, 1e-6);
  EXPECT_NEAR(o2[1].data<float>()[1], 1.2, 1e-6);
}

TEST(NnLossTest, SmoothedWeightedCrossEntropyGradient) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {3, 2}, {1, 1}}) {
    SCOPED_TRACE(fmt::format("N={} K={}", n, k));
    std::vector<int32_t> labels;
    std::vector<float> weights;
    for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>((i * 5 + 3) % k));
    for (int64_t j = 0; j < k; ++j) weights.push_back(0.5f + 0.25f * static_cast<float>(j));
    check_gradients(
        [&](const Scope& s, const Inputs& in) {
          return ops::sparse_softmax_cross_entropy_with_logits(
              s, in[0], in[1], {.label_smoothing = 0.15f, .class_weights = weights});
        },
        testing::tensors(random_tensor(Shape{n, k}, 2, -2.0f, 2.0f), labels_tensor(labels)),
        {.tolerance = 5e-3, .no_grad = {1}});
  }
  Graph g;
  Scope s(g);
  Value logits = s.placeholder("logits", Shape{2, 3});
  Value labels = s.placeholder("labels", Shape{2}, DType::i32);
  std::string msg = error_of([&] {
    ops::sparse_softmax_cross_entropy_with_logits(s, logits, labels, {.class_weights = {1, 2}});
  });
  EXPECT_NE(msg.find("2 class weights for 3 classes"), std::string::npos) << msg;
  msg = error_of([&] {
    ops::sparse_softmax_cross_entropy_with_logits(s, logits, labels, {.label_smoothing = 1.0f});
  });
  EXPECT_NE(msg.find("label smoothing must be in [0, 1), got 1"), std::string::npos) << msg;
}

TEST(NnLossTest, CrossEntropyReportsABadLabel) {
  Tensor logits = random_tensor(Shape{3, 4}, 1);
  Graph g;
  Scope s(g);
  Value pl = s.placeholder("logits", logits.shape());
  Value py = s.placeholder("labels", Shape{3}, DType::i32);
  Value loss = ops::sparse_softmax_cross_entropy_with_logits(s, pl, py);
  for (int32_t bad : {4, -1, 1000}) {
    Tensor labels = labels_tensor({0, bad, 3});
    std::string msg = error_of([&] { evaluate(g, {loss}, {{pl, &logits}, {py, &labels}}); });
    EXPECT_NE(msg.find("(SparseSoftmaxCrossEntropyWithLogits)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("label {} of example 1 is outside [0, 4)", bad)),
              std::string::npos)
        << msg;
  }
}

TEST(NnLossTest, SoftmaxForwardGradientAndHugeLogits) {
  Tensor x = random_tensor(Shape{2, 3, 7}, 3, -4.0f, 4.0f);
  Tensor huge = Tensor::from_vector<float>(Shape{2, 3}, {3e38f, -3e38f, 3e38f, -1e30f, -1e30f, 0});
  Graph g;
  Scope s(g);
  Value px = s.placeholder("x", x.shape()), ph = s.placeholder("huge", huge.shape());
  auto out = evaluate(g, {ops::softmax(s, px), ops::softmax(s, ph)}, {{px, &x}, {ph, &huge}});
  expect_close(out[0], testing::ref_softmax(x), 1e-5, 1e-7);
  expect_close(out[1], {0.5, 0, 0.5, 0, 0, 1}, 1e-6, 1e-7);

  check_gradients([](const Scope& s, const Inputs& in) { return ops::softmax(s, in[0]); },
                  testing::tensors(random_tensor(Shape{4, 5}, 4, -2.0f, 2.0f)),
                  {.tolerance = 5e-3});
  check_gradients([](const Scope& s, const Inputs& in) { return ops::softmax(s, in[0]); },
                  testing::tensors(random_tensor(Shape{3}, 5)), {.tolerance = 5e-3});
}

TEST(NnLossTest, ArgMaxInTopKAndAccuracy) {
  Tensor logits = Tensor::from_vector<float>(Shape{5, 4}, {
                                                              1,   2, 2, 0,  //
                                                              1,   2, 2, 0,  //
                                                              5,   1, 1, 1,  //
                                                              NAN, 1, 2, 3,  //
                                                              0,   0, 9, 0,  //
                                                          });
  Tensor labels = labels_tensor({2, 3, 0, 3, 7});
  Graph g;
  Scope s(g);
  Value pl = s.placeholder("logits", logits.shape());
  Value py = s.placeholder("labels", labels.shape(), DType::i32);
  auto out = evaluate(g,
                      {ops::argmax(s, pl), ops::in_top_k(s, pl, py, 1), ops::in_top_k(s, pl, py, 3),
                       ops::accuracy(s, pl, py)},
                      {{pl, &logits}, {py, &labels}});
  EXPECT_EQ(out[0].dtype(), DType::i32);
  std::vector<int32_t> am = out[0].to_vector<int32_t>();
  EXPECT_EQ(am[0], 1);  // first of the tied maxima
  EXPECT_EQ(am[2], 0);
  EXPECT_EQ(am[4], 2);
  // Row 0: label 2 ties with the max, so it is in the top 1 (TF). Row 1: label 3 has three larger.
  // Row 3 has a NaN: never in the top k. Row 4: label 7 is out of range: not in the top k.
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 0}));
  EXPECT_FLOAT_EQ(out[3].data<float>()[0], 0.4f);
  EXPECT_EQ(out[3].shape(), Shape{});
}

TEST(NnLossTest, ShapeErrorsNameTheOpAndInputs) {
  Graph g;
  Scope s(g);
  Value logits = s.placeholder("logits", Shape{4, 10});
  Value labels = s.placeholder("labels", Shape{3}, DType::i32);
  Value float_labels = s.placeholder("float_labels", Shape{4});
  std::string msg =
      error_of([&] { ops::sparse_softmax_cross_entropy_with_logits(s, logits, labels); });
  EXPECT_NE(msg.find("(SparseSoftmaxCrossEntropyWithLogits)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("labels (3,) must have one entry per row of logits (4, 10)"),
            std::string::npos)
      << msg;
  msg = error_of([&] { ops::sparse_softmax_cross_entropy_with_logits(s, logits, float_labels); });
  EXPECT_NE(msg.find("input 1 must be i32, got f32"), std::string::npos) << msg;
  msg = error_of([&] { ops::in_top_k(s, logits, labels, 1); });
  EXPECT_NE(msg.find("(InTopK)"), std::string::npos) << msg;
  msg = error_of([&] { ops::argmax(s, s.placeholder("scalar", Shape{})); });
  EXPECT_NE(msg.find("(ArgMax)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tower
