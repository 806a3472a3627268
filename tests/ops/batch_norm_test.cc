#include "tower/ops/batch_norm.h"

#include <gtest/gtest.h>

#include "testing/gradient_check.h"
#include "testing/reference_math.h"

// Tolerances. Forward against the double reference: rtol 1e-4, atol 1e-5 (oneDNN computes the
// statistics in float). Gradients: 1e-2 relative. Training-mode batch norm divides by the batch
// standard deviation (~0.6 for inputs in [-1, 1]) and couples every element of a channel, so float
// rounding of the loss, divided by 2 eps, reaches a few 1e-4 on these sizes.

namespace tower {
namespace {

using ops::BatchNormAttrs;
using ops::BatchNormMode;
using testing::error_of;
using testing::evaluate;
using testing::expect_close;
using testing::random_tensor;

struct Feeds {
  Tensor x, gamma, beta, mean, var;
};

Feeds make_feeds(const Shape& x_shape, uint64_t seed) {
  Shape c{x_shape[1]};
  return {random_tensor(x_shape, seed, -1.0f, 3.0f), random_tensor(c, seed + 1, 0.5f, 1.5f),
          random_tensor(c, seed + 2), random_tensor(c, seed + 3),
          random_tensor(c, seed + 4, 0.5f, 2.0f)};
}

// The moving statistics: variables in training mode (their updates write into them), fed
// placeholders in inference mode.
std::pair<Value, Value> moving_stats(const Scope& s, BatchNormMode mode, Value mean, Value var) {
  if (mode == BatchNormMode::inference) return {mean, var};
  Shape c = mean.shape();
  return {s.get_variable("moving_mean", c, Initializer::zeros(), Trainable::no),
          s.get_variable("moving_variance", c, Initializer::ones(), Trainable::no)};
}

TEST(BatchNormTest, ForwardMatchesReference) {
  for (BatchNormMode mode : {BatchNormMode::training, BatchNormMode::inference})
    for (Shape shape : {Shape{2, 3, 4, 5}, Shape{6, 4}, Shape{1, 2, 3, 3}}) {
      SCOPED_TRACE(shape.to_string() +
                   (mode == BatchNormMode::training ? " training" : " inference"));
      Feeds f = make_feeds(shape, 10);
      Graph g;
      Scope s(g);
      Shape c = f.gamma.shape();
      Value x = s.placeholder("x", shape), gamma = s.placeholder("gamma", c),
            beta = s.placeholder("beta", c);
      auto [mean, var] = moving_stats(s, mode, s.placeholder("mean", c), s.placeholder("var", c));
      BatchNormAttrs attrs{.epsilon = 1e-3f, .mode = mode};
      auto bn = ops::batch_norm(s, x, gamma, beta, mean, var, attrs);
      EXPECT_EQ(bn.updates.size(), mode == BatchNormMode::training ? 2u : 0u);
      auto out =
          evaluate(g, {bn.y},
                   {{x, &f.x}, {gamma, &f.gamma}, {beta, &f.beta}, {mean, &f.mean}, {var, &f.var}});
      std::vector<double> m, v;
      if (mode == BatchNormMode::training) {
        testing::ref_batch_stats(f.x, m, v);
      } else {
        m = testing::to_double(f.mean);
        v = testing::to_double(f.var);
      }
      expect_close(out[0], testing::ref_batch_norm(f.x, f.gamma, f.beta, m, v, 1e-3), 1e-4, 1e-5);
    }
}

TEST(BatchNormTest, Gradients) {
  for (BatchNormMode mode : {BatchNormMode::training, BatchNormMode::inference})
    for (Shape shape : {Shape{3, 2, 3, 5}, Shape{7, 3}}) {
      SCOPED_TRACE(shape.to_string() +
                   (mode == BatchNormMode::training ? " training" : " inference"));
      Feeds f = make_feeds(shape, 20);
      testing::check_gradients(
          [mode](const Scope& s, const std::vector<Value>& in) {
            auto [mean, var] = moving_stats(s, mode, in[3], in[4]);
            return ops::batch_norm(s, in[0], in[1], in[2], mean, var, {.mode = mode}).y;
          },
          testing::tensors(f.x.clone(), f.gamma.clone(), f.beta.clone(), f.mean.clone(),
                           f.var.clone()),
          {.tolerance = 1e-2, .no_grad = {3, 4}});
    }
}

TEST(BatchNormTest, UpdatesMovingAveragesInTheVariables) {
  Shape shape{4, 3, 2, 5};
  Feeds f = make_feeds(shape, 30);
  Graph g;
  Scope s(g);
  Scope vs = s.variable_scope("bn");
  Value x = s.placeholder("x", shape);
  Value gamma = vs.get_variable("gamma", Shape{3}, Initializer::ones());
  Value beta = vs.get_variable("beta", Shape{3}, Initializer::zeros());
  Value mean = vs.get_variable("moving_mean", Shape{3}, Initializer::zeros(), Trainable::no);
  Value var = vs.get_variable("moving_variance", Shape{3}, Initializer::ones(), Trainable::no);
  auto bn = ops::batch_norm(s, x, gamma, beta, mean, var, {.momentum = 0.9f});
  ASSERT_EQ(bn.updates.size(), 2u);
  VariableStore variables;
  variables.initialize(g, 1);
  Program program(g, {bn.y}, variables, {}, bn.updates);
  program.input(x).copy_from(f.x);
  std::vector<double> m, v;
  testing::ref_batch_stats(f.x, m, v);
  double bessel = 40.0 / 39.0;  // 4 * 2 * 5 elements per channel
  std::vector<double> want_mean(3, 0.0), want_var(3, 1.0);
  for (int step = 0; step < 2; ++step) {
    program.run(static_cast<uint64_t>(step));
    for (size_t c = 0; c < 3; ++c) {
      want_mean[c] = 0.9 * want_mean[c] + 0.1 * m[c];
      want_var[c] = 0.9 * want_var[c] + 0.1 * v[c] * bessel;
    }
    expect_close(variables.get("bn/moving_mean"), want_mean, 1e-5, 1e-6);
    expect_close(variables.get("bn/moving_variance"), want_var, 1e-5, 1e-6);
  }
}

TEST(BatchNormTest, ErrorsNameTheOpAndInputs) {
  Graph g;
  Scope s(g);
  Value x = s.placeholder("x", Shape{2, 3, 4, 4});
  Value c3 = s.placeholder("c3", Shape{3}), c4 = s.placeholder("c4", Shape{4});
  std::string msg = error_of([&] { ops::batch_norm(s, x, c4, c3, c3, c3); });
  EXPECT_NE(msg.find("(FusedBatchNorm)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input 1 must be (3,)"), std::string::npos) << msg;
  msg = error_of([&] { ops::batch_norm(s, s.placeholder("x3", Shape{2, 3, 4}), c3, c3, c3, c3); });
  EXPECT_NE(msg.find("x must be (N, C) or (N, C, H, W)"), std::string::npos) << msg;
  msg = error_of([&] { ops::batch_norm(s, x, c3, c3, c3, c3); });
  EXPECT_NE(msg.find("(AssignMovingAverage)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be a variable"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tower
