#include "tower/ops/math.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>

#include "testing/gradient_check.h"
#include "testing/reference_math.h"
#include "tower/ops/activation.h"

// Tolerances. Forward: elementwise ops are exact up to float rounding (rtol 1e-6); sums are
// accumulated in double by the kernels and compared with rtol 1e-5. Gradients (central
// differences, eps 1e-3, loss in double): the ops are linear or quadratic, so the only error is
// float rounding of the outputs, about 1e-4 here; 2e-3 leaves a margin without hiding a wrong rule
// (those give errors of order 1).

namespace tower {
namespace {

using testing::check_gradients;
using testing::error_of;
using testing::evaluate;
using testing::expect_close;
using testing::GradCheckOptions;
using testing::random_tensor;
using Inputs = std::vector<Value>;

constexpr double kGradTolerance = 2e-3;

template <typename Build, typename Ref>
void check_binary(Build build, Ref ref, const Shape& a_shape, const Shape& b_shape) {
  Graph g;
  Scope s(g);
  Tensor a = random_tensor(a_shape, 1), b = random_tensor(b_shape, 2);
  Value pa = s.placeholder("a", a_shape), pb = s.placeholder("b", b_shape);
  Value y = build(s, pa, pb);
  EXPECT_EQ(y.shape(), a_shape);
  auto out = evaluate(g, {y}, {{pa, &a}, {pb, &b}});
  expect_close(out[0], testing::ref_binary(a, b, ref), 1e-6);
  check_gradients([&](const Scope& sc, const Inputs& in) { return build(sc, in[0], in[1]); },
                  testing::tensors(random_tensor(a_shape, 3), random_tensor(b_shape, 4)),
                  {.tolerance = kGradTolerance});
}

const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {Shape{5, 7}, Shape{5, 7}},       {Shape{5, 7}, Shape{}},     {Shape{5, 7}, Shape{7}},
    {Shape{3, 4, 5}, Shape{4, 5}},    {Shape{3, 4, 5}, Shape{5}}, {Shape{}, Shape{}},
    {Shape{2, 3, 3, 5}, Shape{3, 5}}, {Shape{1}, Shape{1}},
};

TEST(MathTest, AddForwardAndGradientForEveryBroadcast) {
  for (auto& [a, b] : kBroadcastCases) {
    SCOPED_TRACE(a.to_string() + " + " + b.to_string());
    check_binary(
        ops::add, [](double x, double y) { return x + y; }, a, b);
  }
}

TEST(MathTest, SubForwardAndGradientForEveryBroadcast) {
  for (auto& [a, b] : kBroadcastCases) {
    SCOPED_TRACE(a.to_string() + " - " + b.to_string());
    check_binary(
        ops::sub, [](double x, double y) { return x - y; }, a, b);
  }
}

TEST(MathTest, MulForwardAndGradientForEveryBroadcast) {
  for (auto& [a, b] : kBroadcastCases) {
    SCOPED_TRACE(a.to_string() + " * " + b.to_string());
    check_binary(
        ops::mul, [](double x, double y) { return x * y; }, a, b);
  }
}

TEST(MathTest, LargeBroadcastUsesManyBlocks) {
  // Large enough for the parallel paths (several 16K blocks, many rows).
  for (auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{Shape{300, 257}, Shape{300, 257}},
                                                           {Shape{300, 257}, Shape{257}},
                                                           {Shape{300, 257}, Shape{}}}) {
    Graph g;
    Scope s(g);
    Tensor ta = random_tensor(a, 5), tb = random_tensor(b, 6);
    Value pa = s.placeholder("a", a), pb = s.placeholder("b", b);
    auto out = evaluate(g, {ops::mul(s, pa, pb)}, {{pa, &ta}, {pb, &tb}}, 2);
    expect_close(out[0], testing::ref_binary(ta, tb, [](double x, double y) { return x * y; }),
                 1e-6);
  }
}

TEST(MathTest, ScaleSquareAndAddN) {
  Graph g;
  Scope s(g);
  Tensor x = random_tensor(Shape{4, 9}, 1), z = random_tensor(Shape{4, 9}, 2);
  Value px = s.placeholder("x", x.shape()), pz = s.placeholder("z", z.shape());
  auto out =
      evaluate(g, {ops::scale(s, px, -2.5f), ops::square(s, px), ops::add_n(s, {px, pz, px})},
               {{px, &x}, {pz, &z}});
  auto xd = testing::to_double(x), zd = testing::to_double(z);
  std::vector<double> scaled, squared, summed;
  for (size_t i = 0; i < xd.size(); ++i) {
    scaled.push_back(-2.5 * xd[i]);
    squared.push_back(xd[i] * xd[i]);
    summed.push_back(xd[i] + zd[i] + xd[i]);
  }
  expect_close(out[0], scaled, 1e-6);
  expect_close(out[1], squared, 1e-6);
  expect_close(out[2], summed, 1e-6);

  GradCheckOptions tol{.tolerance = kGradTolerance};
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::scale(sc, in[0], 3.0f); },
                  testing::tensors(random_tensor(Shape{3, 5}, 7)), tol);
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::square(sc, in[0]); },
                  testing::tensors(random_tensor(Shape{7}, 8)), tol);
  check_gradients(
      [](const Scope& sc, const Inputs& in) {
        return ops::add_n(sc, {in[0], in[1], in[2]});
      },
      testing::tensors(random_tensor(Shape{2, 3}, 9), random_tensor(Shape{2, 3}, 10),
                       random_tensor(Shape{2, 3}, 11)),
      tol);
}

// The residual fusions (Add+Relu; AddN+ReluGrad of two gradients), vector loops with a scalar
// tail: the bits of the kernels apart, on a size that 8 does not divide and one of several blocks,
// with zeros, negative zeros and ReLU outputs of exactly 0 among the inputs.
TEST(MathTest, ResidualSumsWithTheirReluKeepTheBitsOfTheKernelsApart) {
  for (const Shape& shape : {Shape{3, 5, 7}, Shape{5, 4099}}) {
    SCOPED_TRACE(shape.to_string());
    Graph graph;
    Scope s(graph);
    Value a = s.placeholder("a", shape), b = s.placeholder("b", shape);
    Value r = s.placeholder("r", shape);
    Value y = ops::relu(s, ops::add(s, a, b));
    Value g = ops::relu_grad(s, ops::add_n(s, {a, b}), r);
    std::vector<Tensor> values;
    for (uint64_t seed : {1, 2, 3}) {
      Tensor t = testing::random_tensor(shape, seed);
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); i += 5) p[i] = i % 2 ? 0.0f : -0.0f;
      values.push_back(std::move(t));
    }
    std::vector<std::vector<Tensor>> outputs;
    for (bool fuse : {false, true}) {
      ProgramOptions options{Device{}, 2};
      options.fuse = fuse;
      VariableStore variables;
      Program program(graph, {y, g}, variables, options);
      EXPECT_EQ(program.stats().fused_nodes, fuse ? 2 : 0);
      program.input(a).copy_from(values[0]);
      program.input(b).copy_from(values[1]);
      program.input(r).copy_from(values[2]);
      program.run();
      outputs.emplace_back();
      for (int k = 0; k < 2; ++k) outputs.back().push_back(program.output(k).clone());
    }
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(
          std::memcmp(outputs[0][k].raw_data(), outputs[1][k].raw_data(), outputs[0][k].nbytes()),
          0)
          << (k == 0 ? "Add+Relu" : "AddN+ReluGrad");
  }
}

TEST(MathTest, ReduceSumOverAxesMatchesReference) {
  Shape shape{3, 4, 1, 5, 6};
  Tensor x = random_tensor(shape, 3);
  struct Case {
    std::vector<int> axes;
    std::vector<bool> reduced;
  };
  std::vector<Case> cases = {
      {{0}, {1, 0, 0, 0, 0}},       {{4}, {0, 0, 0, 0, 1}},
      {{-1}, {0, 0, 0, 0, 1}},      {{1, 3}, {0, 1, 0, 1, 0}},
      {{0, 2, 4}, {1, 0, 1, 0, 1}}, {{0, 1}, {1, 1, 0, 0, 0}},
      {{2}, {0, 0, 1, 0, 0}},       {{}, {0, 0, 0, 0, 0}},
      {{3, 4}, {0, 0, 0, 1, 1}},    {{0, 1, 2, 3, 4}, {1, 1, 1, 1, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("axes [{}]", fmt::join(c.axes, ",")));
    Graph g;
    Scope s(g);
    Value px = s.placeholder("x", shape);
    Value y = ops::reduce_sum(s, px, c.axes);
    Value kept = ops::reduce_sum(s, px, c.axes, ops::KeepDims::yes);
    std::vector<int64_t> kept_dims;
    for (int d = 0; d < shape.rank(); ++d)
      kept_dims.push_back(c.reduced[static_cast<size_t>(d)] ? 1 : shape[d]);
    EXPECT_EQ(kept.shape(), Shape(kept_dims));
    auto out = evaluate(g, {y, kept}, {{px, &x}});
    auto want = testing::ref_reduce_sum(x, c.reduced);
    expect_close(out[0], want, 1e-5, 1e-6);
    expect_close(out[1], want, 1e-5, 1e-6);
  }
}

TEST(MathTest, ReduceSumIsExactEnoughAndThreadIndependentOnLargeInputs) {
  // 5 full blocks and a tail; a float running sum would be off by ~1e-4 relative here.
  Tensor x = random_tensor(Shape{83000}, 4, 0.0f, 1.0f);
  Tensor m = random_tensor(Shape{400, 301}, 5);
  Graph g;
  Scope s(g);
  Value px = s.placeholder("x", x.shape()), pm = s.placeholder("m", m.shape());
  std::vector<Value> fetches = {ops::reduce_sum(s, px), ops::reduce_sum(s, pm, {0}),
                                ops::reduce_sum(s, pm, {1}), ops::l2_loss(s, px)};
  auto one = evaluate(g, fetches, {{px, &x}, {pm, &m}}, 1);
  auto two = evaluate(g, fetches, {{px, &x}, {pm, &m}}, 2);
  expect_close(one[0], testing::ref_reduce_sum(x, {true}), 1e-7);
  expect_close(one[1], testing::ref_reduce_sum(m, {true, false}), 1e-5, 1e-6);
  expect_close(one[2], testing::ref_reduce_sum(m, {false, true}), 1e-5, 1e-6);
  double sq = 0;
  for (int64_t i = 0; i < x.numel(); ++i) sq += 0.5 * x.data<float>()[i] * x.data<float>()[i];
  expect_close(one[3], {sq}, 1e-7);
  for (size_t i = 0; i < fetches.size(); ++i)
    EXPECT_EQ(one[i].to_vector<float>(), two[i].to_vector<float>()) << "fetch " << i;
}

TEST(MathTest, ReduceGradients) {
  GradCheckOptions tol{.tolerance = kGradTolerance};
  Tensor x = random_tensor(Shape{3, 4, 5}, 12);
  for (std::vector<int> axes : std::vector<std::vector<int>>{{0}, {1}, {-1}, {0, 2}, {0, 1, 2}}) {
    SCOPED_TRACE(fmt::format("axes [{}]", fmt::join(axes, ",")));
    check_gradients(
        [&](const Scope& sc, const Inputs& in) { return ops::reduce_sum(sc, in[0], axes); },
        testing::tensors(x.clone()), tol);
    check_gradients(
        [&](const Scope& sc, const Inputs& in) {
          return ops::reduce_mean(sc, in[0], axes, ops::KeepDims::yes);
        },
        testing::tensors(x.clone()), tol);
  }
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::reduce_sum(sc, in[0]); },
                  testing::tensors(x.clone()), tol);
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::reduce_mean(sc, in[0]); },
                  testing::tensors(x.clone()), tol);
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::l2_loss(sc, in[0]); },
                  testing::tensors(random_tensor(Shape{7, 3}, 13)), tol);
}

TEST(MathTest, ReduceMeanAndL2Loss) {
  Graph g;
  Scope s(g);
  Tensor x = Tensor::from_vector<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Value px = s.placeholder("x", x.shape());
  auto out = evaluate(
      g, {ops::reduce_mean(s, px), ops::reduce_mean(s, px, {1}), ops::l2_loss(s, px)}, {{px, &x}});
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 3.5f);
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{2, 5}));
  EXPECT_FLOAT_EQ(out[2].data<float>()[0], 91.0f / 2);
}

TEST(MathTest, ReshapeFlattenBroadcastToAndSumToShape) {
  Graph g;
  Scope s(g);
  Tensor x = random_tensor(Shape{2, 3, 4}, 1);
  Tensor b = random_tensor(Shape{3, 1}, 2);
  Value px = s.placeholder("x", x.shape()), pb = s.placeholder("b", b.shape());
  Value flat = ops::flatten(s, px);
  EXPECT_EQ(flat.shape(), (Shape{2, 12}));
  Value back = ops::reshape(s, flat, Shape{4, 6});
  Value wide = ops::broadcast_to(s, pb, Shape{2, 3, 4});
  Value narrow = ops::sum_to_shape(s, px, Shape{3, 1});
  auto out = evaluate(g, {flat, back, wide, narrow}, {{px, &x}, {pb, &b}});
  EXPECT_EQ(out[0].to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(out[1].to_vector<float>(), x.to_vector<float>());
  std::vector<double> want_wide;
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (int w = 0; w < 4; ++w) want_wide.push_back(b.data<float>()[c]);
  expect_close(out[2], want_wide, 0.0);
  expect_close(out[3], testing::ref_reduce_sum(x, {true, false, true}), 1e-6);

  GradCheckOptions tol{.tolerance = kGradTolerance};
  check_gradients([](const Scope& sc, const Inputs& in) { return ops::flatten(sc, in[0]); },
                  testing::tensors(random_tensor(Shape{3, 2, 5}, 3)), tol);
  for (auto& [from, to] : std::vector<std::pair<Shape, Shape>>{{Shape{3, 1}, Shape{2, 3, 4}},
                                                               {Shape{}, Shape{3, 5}},
                                                               {Shape{1, 5}, Shape{3, 5}},
                                                               {Shape{5}, Shape{2, 3, 5}},
                                                               {Shape{2, 1, 5}, Shape{2, 3, 5}}}) {
    SCOPED_TRACE(from.to_string() + " -> " + to.to_string());
    check_gradients(
        [to = to](const Scope& sc, const Inputs& in) { return ops::broadcast_to(sc, in[0], to); },
        testing::tensors(random_tensor(from, 4)), tol);
    check_gradients([from = from](const Scope& sc,
                                  const Inputs& in) { return ops::sum_to_shape(sc, in[0], from); },
                    testing::tensors(random_tensor(to, 5)), tol);
  }
}

TEST(MathTest, EmptyTensors) {
  Graph g;
  Scope s(g);
  Tensor x(Shape{0, 4}, DType::f32), b = random_tensor(Shape{4}, 1);
  Value px = s.placeholder("x", x.shape()), pb = s.placeholder("b", b.shape());
  auto out = evaluate(g,
                      {ops::add(s, px, pb), ops::reduce_sum(s, px, {0}), ops::reduce_sum(s, px),
                       ops::sum_to_shape(s, px, Shape{4})},
                      {{px, &x}, {pb, &b}});
  EXPECT_EQ(out[0].numel(), 0);
  EXPECT_EQ(out[1].to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(out[2].to_vector<float>(), std::vector<float>(1, 0.0f));
  EXPECT_EQ(out[3].to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(MathTest, ShapeErrorsNameTheOpAndInputs) {
  Graph g;
  Scope s(g);
  Value a = s.placeholder("a", Shape{2, 3});
  Value b = s.placeholder("b", Shape{2});
  std::string msg = error_of([&] { ops::add(s, a, b); });
  EXPECT_NE(msg.find("(Add)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a f32(2, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b f32(2,)"), std::string::npos) << msg;
  msg = error_of([&] { ops::mul(s, b, a); });
  EXPECT_NE(msg.find("(Mul)"), std::string::npos) << msg;
  msg = error_of([&] { ops::reduce_sum(s, a, {2}); });
  EXPECT_NE(msg.find("(ReduceSum)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("axis 2 is out of range"), std::string::npos) << msg;
  msg = error_of([&] { ops::reduce_sum(s, a, {1, -1}); });
  EXPECT_NE(msg.find("listed twice"), std::string::npos) << msg;
  msg = error_of([&] { ops::reshape(s, a, Shape{4, 2}); });
  EXPECT_NE(msg.find("(Reshape)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot reshape (2, 3)"), std::string::npos) << msg;
  msg = error_of([&] { ops::broadcast_to(s, a, Shape{4, 3}); });
  EXPECT_NE(msg.find("(BroadcastTo)"), std::string::npos) << msg;
  msg = error_of([&] { ops::sum_to_shape(s, a, Shape{4}); });
  EXPECT_NE(msg.find("(SumToShape)"), std::string::npos) << msg;
  msg = error_of([&] { ops::add_n(s, {a, b}); });
  EXPECT_NE(msg.find("(AddN)"), std::string::npos) << msg;
  Value labels = s.placeholder("labels", Shape{2, 3}, DType::i32);
  msg = error_of([&] { ops::add(s, labels, a); });
  EXPECT_NE(msg.find("must be f32, got i32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tower
