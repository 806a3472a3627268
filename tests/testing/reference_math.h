// Plain-loop references for op tests (header-only): obviously-correct loops accumulating in
// double, an oracle independent of the kernels (oneDNN or hand-written).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "testing/errors.h"
#include "tower/core/tensor.h"
#include "tower/runtime/program.h"

namespace tower::testing {

// Compiles and runs `fetches` once (variables initialized from the graph), feeding placeholders.
inline std::vector<Tensor> evaluate(const Graph& graph, const std::vector<Value>& fetches,
                                    const std::vector<std::pair<Value, const Tensor*>>& feeds,
                                    int num_threads = 1) {
  VariableStore variables;
  variables.initialize(graph, 1);
  return run_once(graph, fetches, variables, feeds, num_threads);
}

// A vector of move-only tensors (an initializer list would copy them).
template <typename... Ts>
std::vector<Tensor> tensors(Ts&&... ts) {
  std::vector<Tensor> v;
  (v.push_back(std::forward<Ts>(ts)), ...);
  return v;
}

inline std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  const float* p = t.data<float>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  return out;
}

// Checks |got - want| <= atol + rtol * |want| element by element.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double rtol,
                         double atol = 0.0) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  const float* g = got.data<float>();
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(g[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i])) && reported++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want[i];
  }
}

// y = f(a, b) with b of a's shape, a scalar, or a's trailing dims.
template <typename F>
std::vector<double> ref_binary(const Tensor& a, const Tensor& b, F f) {
  std::vector<double> y(static_cast<size_t>(a.numel()));
  int64_t inner = b.numel();
  for (int64_t i = 0; i < a.numel(); ++i)
    y[static_cast<size_t>(i)] =
        f(static_cast<double>(a.data<float>()[i]), static_cast<double>(b.data<float>()[i % inner]));
  return y;
}

// Sum of x over the axes flagged in `reduced`, output in row-major order of the kept axes.
inline std::vector<double> ref_reduce_sum(const Tensor& x, const std::vector<bool>& reduced) {
  const Shape& s = x.shape();
  int64_t out_numel = 1;
  for (int d = 0; d < s.rank(); ++d)
    if (!reduced[static_cast<size_t>(d)]) out_numel *= s[d];
  std::vector<double> y(static_cast<size_t>(out_numel), 0.0);
  std::vector<int64_t> index(static_cast<size_t>(s.rank()), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, out = 0, out_stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      index[static_cast<size_t>(d)] = rest % s[d];
      rest /= s[d];
    }
    for (int d = s.rank() - 1; d >= 0; --d) {
      if (reduced[static_cast<size_t>(d)]) continue;
      out += index[static_cast<size_t>(d)] * out_stride;
      out_stride *= s[d];
    }
    y[static_cast<size_t>(out)] += x.data<float>()[i];
  }
  return y;
}

// y (M, N) = op(a) op(b); a is (M, K) or, transposed, (K, M); b is (K, N) or (N, K).
inline std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  int64_t m = ta ? a.shape()[1] : a.shape()[0], k = ta ? a.shape()[0] : a.shape()[1];
  int64_t n = tb ? b.shape()[0] : b.shape()[1];
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(ta ? pa[p * m + i] : pa[i * k + p]) *
               (tb ? pb[j * k + p] : pb[p * n + j]);
      y[static_cast<size_t>(i * n + j)] = sum;
    }
  return y;
}

// Softmax over the last axis.
inline std::vector<double> ref_softmax(const Tensor& x) {
  int64_t k = x.shape()[x.shape().rank() - 1];
  std::vector<double> y(static_cast<size_t>(x.numel()));
  const float* p = x.data<float>();
  for (int64_t r = 0; r < x.numel() / k; ++r) {
    double m = p[r * k];
    for (int64_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(p[r * k + j]));
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(p[r * k + j] - m);
    for (int64_t j = 0; j < k; ++j)
      y[static_cast<size_t>(r * k + j)] = std::exp(p[r * k + j] - m) / sum;
  }
  return y;
}

// Per-example cross-entropy of logits (N, K) against i32 labels (N,).
inline std::vector<double> ref_sparse_xent(const Tensor& logits, const Tensor& labels) {
  int64_t n = logits.shape()[0], k = logits.shape()[1];
  const float* p = logits.data<float>();
  std::vector<double> loss(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double m = p[i * k];
    for (int64_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(p[i * k + j]));
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(p[i * k + j] - m);
    loss[static_cast<size_t>(i)] = m + std::log(sum) - p[i * k + labels.data<int32_t>()[i]];
  }
  return loss;
}

// Per-channel mean and biased variance of x (N, C) or (N, C, H, W).
inline void ref_batch_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const Shape& s = x.shape();
  int64_t n = s[0], c = s[1], hw = x.numel() / (n * c);
  mean.assign(static_cast<size_t>(c), 0.0);
  var.assign(static_cast<size_t>(c), 0.0);
  const float* p = x.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) sum += p[(i * c + ch) * hw + j];
    double mu = sum / static_cast<double>(n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        double d = p[(i * c + ch) * hw + j] - mu;
        sq += d * d;
      }
    mean[static_cast<size_t>(ch)] = mu;
    var[static_cast<size_t>(ch)] = sq / static_cast<double>(n * hw);
  }
}

// gamma * (x - mean) / sqrt(var + epsilon) + beta, per channel.
inline std::vector<double> ref_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const std::vector<double>& mean,
                                          const std::vector<double>& var, double epsilon) {
  const Shape& s = x.shape();
  int64_t n = s[0], c = s[1], hw = x.numel() / (n * c);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      double inv = 1.0 / std::sqrt(var[static_cast<size_t>(ch)] + epsilon);
      for (int64_t j = 0; j < hw; ++j) {
        int64_t at = (i * c + ch) * hw + j;
        y[static_cast<size_t>(at)] =
            gamma.data<float>()[ch] * (x.data<float>()[at] - mean[static_cast<size_t>(ch)]) * inv +
            beta.data<float>()[ch];
      }
    }
  return y;
}

}  // namespace tower::testing
