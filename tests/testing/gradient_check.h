// Finite-difference gradient check for ops (header-only test helper).
//
//   check_gradients([](const Scope& s, const std::vector<Value>& in) {
//                     return ops::relu(s, in[0]); },
//                   {random_tensor(Shape{2, 3}, 1)}, {.tolerance = 1e-2});
//
// The check differentiates L = sum(y * r) for a fixed random r (so any output shape works):
// the analytic gradient comes from tower::gradients with grad_ys = r, the numeric one from central
// differences of L computed in double. Inputs listed in `no_grad` (e.g. integer labels) are fed
// but not checked.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <vector>

#include "tower/core/philox.h"
#include "tower/graph/gradients.h"
#include "tower/runtime/program.h"

namespace tower::testing {

inline Tensor random_tensor(Shape shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t(std::move(shape), DType::f32);
  Philox rng(seed, 17);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = low + (high - low) * rng.uniform(static_cast<uint64_t>(i));
  return t;
}

struct GradCheckOptions {
  double eps = 1e-3;              // central-difference step
  double tolerance = 1e-2;        // max |analytic - numeric| / max(1, |numeric|)
  std::set<int> no_grad;          // input indices not to check
  int max_checks_per_input = 64;  // elements probed per input (spread over the tensor)
};

using BuildFn = std::function<Value(const Scope&, const std::vector<Value>&)>;

inline void check_gradients(const BuildFn& build, const std::vector<Tensor>& inputs,
                            const GradCheckOptions& options = {}) {
  Graph graph;
  Scope scope(graph);
  std::vector<Value> placeholders;
  for (size_t i = 0; i < inputs.size(); ++i)
    placeholders.push_back(
        scope.placeholder("input" + std::to_string(i), inputs[i].shape(), inputs[i].dtype()));
  Value y = build(scope, placeholders);
  Value dy = scope.placeholder("dy", y.shape());
  std::vector<Value> xs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!options.no_grad.count(static_cast<int>(i))) xs.push_back(placeholders[i]);
  std::vector<Value> grads = gradients(scope, {y}, xs, {dy});

  Tensor r = random_tensor(y.shape(), 99);
  VariableStore variables;
  variables.initialize(graph, 1);
  std::vector<Value> fetches = {y};
  for (const Value& g : grads) {
    ASSERT_TRUE(g.defined()) << "no gradient reaches an input";
    fetches.push_back(g);
  }
  Program program(graph, fetches, variables, {});
  std::vector<Tensor> fed;
  for (size_t i = 0; i < inputs.size(); ++i) fed.push_back(inputs[i].clone());
  auto feed = [&] {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (program.has_input(placeholders[i])) program.input(placeholders[i]).copy_from(fed[i]);
    if (program.has_input(dy)) program.input(dy).copy_from(r);
  };
  auto loss = [&]() {
    feed();
    program.run();
    const float* yp = program.output(0).data<float>();
    const float* rp = r.data<float>();
    double sum = 0;
    for (int64_t k = 0; k < r.numel(); ++k) sum += static_cast<double>(yp[k]) * rp[k];
    return sum;
  };
  loss();
  std::vector<Tensor> analytic;
  for (size_t g = 0; g < grads.size(); ++g)
    analytic.push_back(program.output(1 + static_cast<int>(g)).clone());

  size_t g = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (options.no_grad.count(static_cast<int>(i))) continue;
    Tensor& x = fed[i];
    const float* a = analytic[g++].data<float>();
    int64_t n = x.numel();
    int64_t stride = std::max<int64_t>(1, n / options.max_checks_per_input);
    for (int64_t k = 0; k < n; k += stride) {
      float saved = x.data<float>()[k];
      x.data<float>()[k] = saved + static_cast<float>(options.eps);
      double plus = loss();
      x.data<float>()[k] = saved - static_cast<float>(options.eps);
      double minus = loss();
      x.data<float>()[k] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double err = std::fabs(a[k] - numeric) / std::max(1.0, std::fabs(numeric));
      EXPECT_LE(err, options.tolerance)
          << "input " << i << " element " << k << ": analytic " << a[k] << " numeric " << numeric;
    }
  }
}

}  // namespace tower::testing
