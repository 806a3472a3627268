// Plain-loop references for the NN ops (header-only, tests only): straight from the definitions,
// accumulating in double, so they are an oracle independent of oneDNN.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tower/core/philox.h"
#include "tower/core/tensor.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"
#include "tower/ops/pool.h"
#include "tower/runtime/program.h"

namespace tower::testing {

// x (N, C, H, W), w (K, C / G, KH, KW) -> (N, K, OH, OW), zero padding as TensorFlow places it;
// output channel k sees the input channels of its group, the filter's taps dilated.
inline Tensor conv2d_reference(const Tensor& x, const Tensor& w, const ops::Conv2DAttrs& a) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const auto [ph, pw] = ops::conv_padding(xs, ws, a);
  Tensor y(Shape{xs[0], ws[0], ph.out, pw.out}, DType::f32);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* yp = y.data<float>();
  const int64_t per_group = ws[0] / a.groups;
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t k = 0; k < ws[0]; ++k)
      for (int64_t oh = 0; oh < ph.out; ++oh)
        for (int64_t ow = 0; ow < pw.out; ++ow) {
          double sum = 0;
          for (int64_t ci = 0; ci < ws[1]; ++ci)
            for (int64_t i = 0; i < ws[2]; ++i)
              for (int64_t j = 0; j < ws[3]; ++j) {
                const int64_t c = k / per_group * ws[1] + ci;
                const int64_t h = oh * a.strides[0] - ph.before + i * a.dilations[0];
                const int64_t v = ow * a.strides[1] - pw.before + j * a.dilations[1];
                if (h < 0 || h >= xs[2] || v < 0 || v >= xs[3]) continue;
                sum += static_cast<double>(xp[((n * xs[1] + c) * xs[2] + h) * xs[3] + v]) *
                       wp[((k * ws[1] + ci) * ws[2] + i) * ws[3] + j];
              }
          yp[((n * ws[0] + k) * ph.out + oh) * pw.out + ow] = static_cast<float>(sum);
        }
  return y;
}

// b (C,) added along axis 1 of x (rank 2 or 4).
inline Tensor bias_add_reference(const Tensor& x, const Tensor& b) {
  Tensor y = x.clone();
  int64_t channels = x.shape()[1];
  int64_t inner = x.numel() / (x.shape()[0] * channels);
  float* yp = y.data<float>();
  const float* bp = b.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] += bp[(i / inner) % channels];
  return y;
}

// Max over the window's real elements, or their mean (padding is never counted).
inline Tensor pool_reference(const Tensor& x, const ops::PoolAttrs& a, bool is_max) {
  const Shape& xs = x.shape();
  const auto [ph, pw] = ops::pool_padding(xs, a);
  Tensor y(Shape{xs[0], xs[1], ph.out, pw.out}, DType::f32);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc)
    for (int64_t oh = 0; oh < ph.out; ++oh)
      for (int64_t ow = 0; ow < pw.out; ++ow) {
        double sum = 0;
        double best = -std::numeric_limits<double>::infinity();
        int64_t count = 0;
        for (int64_t i = 0; i < a.ksize[0]; ++i)
          for (int64_t j = 0; j < a.ksize[1]; ++j) {
            int64_t h = oh * a.strides[0] - ph.before + i;
            int64_t v = ow * a.strides[1] - pw.before + j;
            if (h < 0 || h >= xs[2] || v < 0 || v >= xs[3]) continue;
            double value = xp[(nc * xs[2] + h) * xs[3] + v];
            sum += value;
            best = std::max(best, value);
            ++count;
          }
        yp[(nc * ph.out + oh) * pw.out + ow] =
            static_cast<float>(is_max ? best : sum / static_cast<double>(count));
      }
  return y;
}

// TensorFlow's LRN across axis 1: x / (bias + alpha * sum of squares in the window)^beta.
inline Tensor lrn_reference(const Tensor& x, const ops::LRNAttrs& a) {
  const Shape& xs = x.shape();
  int64_t channels = xs[1], inner = xs[2] * xs[3];
  Tensor y(xs, DType::f32);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        double sqr_sum = 0;
        for (int64_t d = std::max<int64_t>(0, c - a.depth_radius);
             d <= std::min(channels - 1, c + a.depth_radius); ++d) {
          double v = xp[(n * channels + d) * inner + i];
          sqr_sum += v * v;
        }
        double v = xp[(n * channels + c) * inner + i];
        yp[(n * channels + c) * inner + i] =
            static_cast<float>(v / std::pow(a.bias + a.alpha * sqr_sum, a.beta));
      }
  return y;
}

// Elementwise f applied in double.
template <typename F>
Tensor map_reference(const Tensor& x, F f) {
  Tensor y(x.shape(), DType::f32);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(f(static_cast<double>(xp[i])));
  return y;
}

// max |a - b| / max(1, |b|) over elements; a and b of one shape.
inline double max_relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double err = std::fabs(static_cast<double>(ap[i]) - bp[i]) /
                 std::max(1.0, std::fabs(static_cast<double>(bp[i])));
    if (!(err <= worst)) worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
  }
  return worst;
}

// Builds a graph of placeholders for `inputs` plus what `build` adds, runs it once on the CPU and
// returns the value of build's result.
inline Tensor run_graph(const std::function<Value(const Scope&, const std::vector<Value>&)>& build,
                        const std::vector<const Tensor*>& inputs, int num_threads = 2) {
  Graph graph;
  Scope scope(graph);
  std::vector<Value> placeholders;
  std::vector<std::pair<Value, const Tensor*>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    placeholders.push_back(scope.placeholder("input" + std::to_string(i), inputs[i]->shape()));
    feeds.push_back({placeholders.back(), inputs[i]});
  }
  Value y = build(scope, placeholders);
  VariableStore variables;
  return std::move(run_once(graph, {y}, variables, feeds, num_threads)[0]);
}

// A vector of move-only tensors (an initializer list would copy).
template <typename... T>
std::vector<Tensor> tensor_list(T&&... tensors) {
  std::vector<Tensor> list;
  (list.push_back(std::forward<T>(tensors)), ...);
  return list;
}

// Random values in [-1, 1] pushed at least `gap` away from 0 (for ops with a kink at 0, so that
// central differences never straddle it).
inline Tensor away_from_zero(Tensor t, float gap) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] < 0 ? p[i] - gap : p[i] + gap;
  return t;
}

// The values 0, step, 2 step, ... in an order shuffled by `seed`, centered on 0: distinct inputs
// with no near-ties (max pooling's gradient is only defined away from ties).
inline Tensor distinct_values(Shape shape, uint64_t seed, float step = 0.01f) {
  Tensor t(std::move(shape), DType::f32);
  int64_t n = t.numel();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  Philox rng(seed, 23);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)],
              order[rng.below(static_cast<uint64_t>(i), static_cast<uint32_t>(i + 1))]);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i)
    p[i] = (static_cast<float>(order[static_cast<size_t>(i)]) - static_cast<float>(n) / 2) * step;
  return t;
}

}  // namespace tower::testing
