#include "tower/ops/activation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradient_check.h"
#include "testing/reference_nn.h"

namespace tower {
namespace {

using testing::random_tensor;

struct Activation {
  const char* name;
  Value (*build)(const Scope&, Value);
  double (*reference)(double);
};

const Activation kActivations[] = {
    {"Relu", ops::relu, [](double x) { return x > 0 ? x : 0.0; }},
    {"Elu", ops::elu, [](double x) { return x > 0 ? x : std::expm1(x); }},
    {"Sigmoid", ops::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
    {"Tanh", ops::tanh, [](double x) { return std::tanh(x); }},
};

Tensor apply(const Activation& f, const Tensor& x) {
  return testing::run_graph(
      [&](const Scope& s, const std::vector<Value>& in) { return f.build(s, in[0]); }, {&x});
}

TEST(ActivationTest, ForwardMatchesReference) {
  for (const Activation& f : kActivations) {
    Tensor x = random_tensor(Shape{3, 5, 7, 9}, 1, -4.0f, 4.0f);
    EXPECT_LE(testing::max_relative_error(apply(f, x), testing::map_reference(x, f.reference)),
              1e-6)
        << f.name;
  }
}

// Saturated inputs must give finite, exact limits (no exp overflow into NaN), and so must the
// gradients there.
TEST(ActivationTest, ExtremeInputsStayFinite) {
  std::vector<float> values = {-100.0f, -88.0f, -30.0f, 0.0f, 30.0f, 88.0f, 100.0f, -1e30f, 1e30f};
  Tensor x = Tensor::from_vector(Shape{static_cast<int64_t>(values.size())}, values);
  for (const Activation& f : kActivations) {
    Tensor y = apply(f, x);
    Tensor expected = testing::map_reference(x, f.reference);
    for (size_t i = 0; i < values.size(); ++i) {
      float got = y.data<float>()[i];
      EXPECT_TRUE(std::isfinite(got)) << f.name << "(" << values[i] << ") = " << got;
      EXPECT_NEAR(got, expected.data<float>()[i],
                  1e-6 * std::max(1.0f, std::fabs(expected.data<float>()[i])))
          << f.name << "(" << values[i] << ")";
    }
    Tensor dx = testing::run_graph(
        [&](const Scope& s, const std::vector<Value>& in) {
          Value y = f.build(s, in[0]);
          return gradients(s, {y}, {in[0]}, {s.constant("ones", y.shape(), 1.0f)})[0];
        },
        {&x});
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_TRUE(std::isfinite(dx.data<float>()[i]))
          << "d" << f.name << "(" << values[i] << ") = " << dx.data<float>()[i];
  }
}

// Inputs kept 0.05 away from 0 (Relu and Elu have a kink or a curvature jump there). f32 central
// differences with eps 1e-3: errors ~1e-4, checked at 1e-2.
TEST(ActivationTest, GradientsMatchFiniteDifferences) {
  uint64_t seed = 100;
  for (const Shape& shape : {Shape{3, 5, 7, 9}, Shape{7}, Shape{2, 13}})
    for (const Activation& f : kActivations) {
      SCOPED_TRACE(std::string(f.name) + " " + shape.to_string());
      testing::check_gradients(
          [&](const Scope& s, const std::vector<Value>& in) { return f.build(s, in[0]); },
          testing::tensor_list(
              testing::away_from_zero(random_tensor(shape, seed++, -3.0f, 3.0f), 0.05f)),
          {.tolerance = 1e-2});
    }
}

TEST(ActivationTest, GradShapeMismatchNamesTheOp) {
  Graph graph;
  Scope scope(graph);
  Value dy = scope.placeholder("dy", Shape{2, 3});
  Value y = scope.placeholder("y", Shape{3, 2});
  try {
    ops::tanh_grad(scope, dy, y);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TanhGrad"), std::string::npos) << e.what();
  }
  Value labels = scope.placeholder("labels", Shape{4}, DType::i32);
  try {
    ops::relu(scope, labels);
    FAIL() << "expected a dtype error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Relu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tower
