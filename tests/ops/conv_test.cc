#include "tower/ops/conv.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "testing/gradient_check.h"
#include "testing/reference_nn.h"
#include "tower/core/device.h"
#include "tower/kernels/cpu/conv.h"
#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/math.h"

namespace tower {
namespace {

using ops::Conv2DAttrs;
using ops::Padding;
using testing::random_tensor;

struct ConvCase {
  Shape x, w;
  Conv2DAttrs attrs;
};

Conv2DAttrs attrs_of(std::array<int64_t, 2> strides, Padding padding, int64_t groups,
                     std::array<int64_t, 2> dilations = {1, 1}) {
  Conv2DAttrs a{strides, padding};
  a.groups = groups;
  a.dilations = dilations;
  return a;
}
Conv2DAttrs given(std::array<int64_t, 2> strides, std::array<int64_t, 2> pads, int64_t groups = 1) {
  Conv2DAttrs a = attrs_of(strides, Padding::given, groups);
  a.pads = pads;
  return a;
}

// Odd sizes, strides that do not divide the input, even filters (asymmetric SAME padding).
const ConvCase kCases[] = {
    {{2, 3, 7, 9}, {4, 3, 3, 3}, {{1, 1}, Padding::same}},
    {{2, 3, 7, 9}, {4, 3, 4, 2}, {{2, 1}, Padding::same}},
    {{1, 2, 8, 5}, {3, 2, 2, 2}, {{1, 1}, Padding::same}},
    {{3, 5, 9, 7}, {2, 5, 3, 5}, {{2, 3}, Padding::valid}},
    {{2, 4, 6, 6}, {5, 4, 1, 1}, {{1, 1}, Padding::valid}},
    {{1, 1, 5, 5}, {1, 1, 5, 5}, {{1, 1}, Padding::valid}},
    {{2, 3, 5, 5}, {2, 3, 3, 3}, {{3, 3}, Padding::same}},
    // grouped (2 groups), depthwise (one and two filters per channel), dilated, and all at once
    {{2, 4, 7, 6}, {6, 2, 3, 3}, attrs_of({1, 1}, Padding::same, 2)},
    {{2, 5, 7, 7}, {5, 1, 3, 3}, attrs_of({2, 2}, Padding::same, 5)},
    {{1, 3, 6, 8}, {6, 1, 3, 3}, attrs_of({1, 1}, Padding::valid, 3)},
    {{2, 3, 9, 8}, {4, 3, 3, 2}, attrs_of({1, 2}, Padding::same, 1, {2, 3})},
    {{2, 4, 9, 9}, {4, 1, 3, 3}, attrs_of({2, 1}, Padding::valid, 4, {2, 2})},
    // given pads (torchvision's): 7x7 stride 2 pad 3 on an even input, 3x3 stride 2 pad 1
    // (SAME pads 0 before), 1x1 stride 2, and a depthwise one
    {{2, 3, 10, 8}, {4, 3, 7, 7}, given({2, 2}, {3, 3})},
    {{2, 4, 8, 8}, {6, 4, 3, 3}, given({2, 2}, {1, 1})},
    {{2, 4, 8, 7}, {6, 4, 1, 1}, given({2, 2}, {0, 0})},
    {{2, 6, 8, 8}, {6, 1, 3, 3}, given({2, 2}, {1, 1}, 6)},
};

TEST(Conv2DTest, AxisPaddingFollowsTensorFlow) {
  ops::AxisPadding p = ops::axis_padding(7, 4, 2, Padding::same);  // out 4, total 3
  EXPECT_EQ(p.out, 4);
  EXPECT_EQ(p.before, 1);
  EXPECT_EQ(p.after, 2);
  p = ops::axis_padding(24, 5, 1, Padding::same);
  EXPECT_EQ(p.out, 24);
  EXPECT_EQ(p.before, 2);
  EXPECT_EQ(p.after, 2);
  p = ops::axis_padding(9, 3, 2, Padding::valid);
  EXPECT_EQ(p.out, 4);
  EXPECT_EQ(p.before + p.after, 0);
  p = ops::axis_padding(5, 1, 3, Padding::same);  // stride larger than the window: no padding
  EXPECT_EQ(p.out, 2);
  EXPECT_EQ(p.before + p.after, 0);
}

TEST(Conv2DTest, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const ConvCase& c : kCases) {
    Tensor x = random_tensor(c.x, seed++);
    Tensor w = random_tensor(c.w, seed++);
    Tensor y = testing::run_graph(
        [&](const Scope& s, const std::vector<Value>& in) {
          return ops::conv2d(s, in[0], in[1], c.attrs);
        },
        {&x, &w});
    Tensor expected = testing::conv2d_reference(x, w, c.attrs);
    ASSERT_EQ(y.shape(), expected.shape()) << c.x.to_string() << " * " << c.w.to_string();
    EXPECT_LE(testing::max_relative_error(y, expected), 1e-5)
        << c.x.to_string() << " * " << c.w.to_string();
  }
}

// The CIFAR-10 model's conv1 shape, in a batch large enough for oneDNN's blocked kernels.
TEST(Conv2DTest, ForwardMatchesReferenceOnCifarShape) {
  Conv2DAttrs attrs{{1, 1}, Padding::same};
  Tensor x = random_tensor(Shape{4, 3, 24, 24}, 11);
  Tensor w = random_tensor(Shape{64, 3, 5, 5}, 12);
  Tensor y = testing::run_graph(
      [&](const Scope& s, const std::vector<Value>& in) {
        return ops::conv2d(s, in[0], in[1], attrs);
      },
      {&x, &w});
  EXPECT_LE(testing::max_relative_error(y, testing::conv2d_reference(x, w, attrs)), 1e-5);
}

// Depthwise and grouped dilated convolutions at sizes where oneDNN's blocked (jit) kernels run.
TEST(Conv2DTest, GroupedConvolutionsMatchReferenceInBlockedKernels) {
  const ConvCase cases[] = {
      {{16, 32, 12, 12}, {32, 1, 3, 3}, attrs_of({1, 1}, Padding::same, 32)},
      {{16, 32, 12, 12}, {32, 1, 3, 3}, attrs_of({2, 2}, Padding::same, 32)},
      {{16, 32, 12, 12}, {64, 4, 3, 3}, attrs_of({1, 1}, Padding::same, 8, {2, 2})}};
  uint64_t seed = 50;
  for (const ConvCase& c : cases) {
    Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++);
    Tensor y = testing::run_graph(
        [&](const Scope& s, const std::vector<Value>& in) {
          return ops::conv2d(s, in[0], in[1], c.attrs);
        },
        {&x, &w});
    EXPECT_LE(testing::max_relative_error(y, testing::conv2d_reference(x, w, c.attrs)), 1e-5)
        << c.w.to_string() << " groups " << c.attrs.groups;
  }
}

// f32 central differences with eps 1e-3 on sums of ~100 products: 1e-2 relative leaves room for
// rounding (the errors seen are ~1e-3). Random x and w from seeds `seed` and `seed + 1`.
// The convolution is linear in each input, so a central difference is exact at any step: a large
// one keeps the rounding of the forward kernel (Winograd's, 6e-5 of the output) out of it.
void check_conv_gradients(const ConvCase& c, uint64_t seed) {
  testing::check_gradients(
      [&](const Scope& s, const std::vector<Value>& in) {
        return ops::conv2d(s, in[0], in[1], c.attrs);
      },
      testing::tensor_list(random_tensor(c.x, seed), random_tensor(c.w, seed + 1)),
      {.eps = 0.1, .tolerance = 1e-2});
}

TEST(Conv2DTest, GradientsMatchFiniteDifferences) {
  uint64_t seed = 100;
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(c.x.to_string() + " * " + c.w.to_string());
    check_conv_gradients(c, seed);
    seed += 2;
  }
}

TEST(Conv2DTest, ChannelMismatchNamesTheOp) {
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("images", Shape{2, 3, 8, 8});
  Value w = scope.placeholder("weights", Shape{4, 5, 3, 3});
  try {
    ops::conv2d(scope, x, w);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("Conv2D"), std::string::npos) << what;
    EXPECT_NE(what.find("channels"), std::string::npos) << what;
    EXPECT_NE(what.find("weights"), std::string::npos) << what;
  }
}

TEST(Conv2DTest, ShapeErrorsNameTheOp) {
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("images", Shape{2, 3, 4, 4});
  Value flat = scope.placeholder("flat", Shape{2, 48});
  Value w = scope.placeholder("weights", Shape{4, 3, 5, 5});
  Value w3 = scope.placeholder("weights3", Shape{3, 5, 5});
  auto expect_error = [](auto f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected a shape error mentioning " << needle;
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("Conv2D"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error([&] { ops::conv2d(scope, x, w, {{1, 1}, Padding::valid}); }, "VALID");
  expect_error([&] { ops::conv2d(scope, flat, w); }, "rank 4");
  expect_error([&] { ops::conv2d(scope, x, w3); }, "rank 4");
  expect_error([&] { ops::conv2d(scope, x, w, {{0, 1}, Padding::same}); }, "strides");
  Value dy = scope.placeholder("dy", Shape{2, 4, 3, 3});
  expect_error([&] { ops::conv2d_backprop_input(scope, w, dy, x.shape(), {}); }, "gradient");
}

// An empty batch is legal: empty outputs, and a zero filter gradient.
TEST(Conv2DTest, EmptyBatch) {
  Graph graph;
  Scope scope(graph);
  Value x = scope.placeholder("x", Shape{0, 3, 5, 5});
  Value w = scope.placeholder("w", Shape{4, 3, 3, 3});
  Value y = ops::conv2d(scope, x, w);
  Value dy = scope.placeholder("dy", y.shape());
  std::vector<Value> grads = gradients(scope, {y}, {x, w}, {dy});
  VariableStore variables;
  Tensor w_value = random_tensor(Shape{4, 3, 3, 3}, 1);
  Tensor empty(Shape{0, 3, 5, 5}, DType::f32);
  std::vector<Tensor> out =
      run_once(graph, {y, grads[0], grads[1]}, variables, {{w, &w_value}, {x, &empty}});
  EXPECT_EQ(out[0].shape(), (Shape{0, 4, 5, 5}));
  EXPECT_EQ(out[1].shape(), (Shape{0, 3, 5, 5}));
  for (float v : out[2].to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

// Stride 1, 3x3 filters, SAME padding and the same 16 channels or more on both sides: under AVX2
// (and AVX-512 on AMD) the forward convolution runs as the backward-data convolution of its
// flipped filter; under AVX-512 on AMD, with 32 channels or more in blocks of 16, all three passes
// run oneDNN's Winograd kernels instead (conv.cc), and under AVX2, with output channels in blocks
// of 16, tower's own (conv_winograd.cc, conv_filter_grad_winograd.cc). Its values match the
// reference and its gradients finite differences; one program run with a second filter flips that
// one (the flip is redone every run, as a variable's update requires).
TEST(Conv2DTest, SameConvolutionsWithManyChannelsMatchReference) {
  const ConvCase cases[] = {
      {{2, 16, 9, 7}, {16, 16, 3, 3}, {{1, 1}, Padding::same}},
      {{3, 24, 6, 6}, {24, 24, 3, 3}, {{1, 1}, Padding::same}},
      {{2, 32, 5, 8}, {32, 32, 3, 3}, {{1, 1}, Padding::same}},
      {{3, 64, 8, 8}, {64, 64, 3, 3}, {{1, 1}, Padding::same}},
      {{2, 32, 7, 9}, {48, 32, 3, 3}, {{1, 1}, Padding::same}},
      {{3, 16, 6, 6}, {24, 16, 5, 5}, {{1, 1}, Padding::same}},  // (the forward kernel)
  };
  uint64_t seed = 300;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.x.to_string() + " * " + c.w.to_string());
    Graph graph;
    Scope s(graph);
    Value x = s.placeholder("x", c.x);
    Value w = s.placeholder("w", c.w);
    Value y = ops::conv2d(s, x, w, c.attrs);
    VariableStore variables;
    Program program(graph, {y}, variables, {Device{}, 2});
    const Tensor xv = random_tensor(c.x, seed++);
    program.input(x).copy_from(xv);
    for (int run = 0; run < 2; ++run) {
      const Tensor wv = random_tensor(c.w, seed++);
      program.input(w).copy_from(wv);
      program.run();
      // (oneDNN's Winograd F(4x4, 3x3) rounds its transforms: within 6e-5 here; direct 1e-6)
      EXPECT_LE(testing::max_relative_error(program.output(0),
                                            testing::conv2d_reference(xv, wv, c.attrs)),
                c.x[1] >= 32 ? 1e-4 : 1e-5)
          << "run " << run;
    }
    check_conv_gradients(c, seed);
    seed += 2;
  }
}

// The same convolutions with a bias and ReLU after them, run as one kernel (Conv2D+BiasAdd+Relu)
// and as three, on one thread and on two, with a batch that 16 does not divide: the reference's
// values; where tower's loops add the bias and ReLU (the adjoint: the backward-data convolution in
// chunks of images, each chunk's epilogue right after it; Winograd under AVX2: each tile's) the
// same bits fused and apart.
TEST(Conv2DTest, SameConvolutionsKeepTheirBitsFusedWithBiasAndRelu) {
  const Conv2DAttrs same{{1, 1}, Padding::same};
  for (const Shape& xs : {Shape{6, 16, 7, 5}, Shape{32, 24, 6, 6}, Shape{5, 32, 7, 6}}) {
    SCOPED_TRACE(xs.to_string());
    Graph graph;
    Scope s(graph);
    Value x = s.placeholder("x", xs);
    Value w = s.placeholder("w", Shape{xs[1], xs[1], 3, 3});
    Value b = s.placeholder("b", Shape{xs[1]});
    Value y = ops::relu(s, ops::bias_add(s, ops::conv2d(s, x, w, same), b));
    const Tensor xv = random_tensor(xs, 1), wv = random_tensor(w.shape(), 2),
                 bv = random_tensor(b.shape(), 3);
    Tensor want = testing::conv2d_reference(xv, wv, same);
    const int64_t plane = want.shape()[2] * want.shape()[3];
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float v = want.data<float>()[i] + bv.data<float>()[i / plane % xs[1]];
      want.data<float>()[i] = v > 0 ? v : 0;
    }
    VariableStore variables;
    for (int threads : {1, 2}) {
      std::vector<Tensor> outputs;
      for (bool fuse : {false, true}) {
        ProgramOptions options{Device{}, threads};
        options.fuse = fuse;
        Program program(graph, {y}, variables, options);
        EXPECT_EQ(program.stats().fused_nodes, fuse ? 2 : 0);
        program.input(x).copy_from(xv);
        program.input(w).copy_from(wv);
        program.input(b).copy_from(bv);
        program.run();
        outputs.push_back(program.output(0).clone());
      }
      // (Winograd's transforms round: oneDNN's from 32 channels, tower's under AVX2 from 16)
      const bool winograd = xs[1] >= 32 || (cpu_isa() == CpuIsa::avx2 && xs[1] % 16 == 0);
      const double bound = winograd ? 1e-4 : 1e-5;
      EXPECT_LE(testing::max_relative_error(outputs[1], want), bound) << threads << " threads";
      EXPECT_LE(testing::max_relative_error(outputs[0], want), bound) << threads << " threads";
      // Where tower's own loops add the epilogue: under AVX2 (Winograd, or the adjoint where the
      // channels are not in blocks of 16), and the adjoint's 16 channels on AVX-512 AMD CPUs.
      // (oneDNN's own post-ops round otherwise, as where the channels do not fill the blocks.)
      const bool own_epilogue =
          cpu_isa() == CpuIsa::avx2 ? xs[1] % 8 == 0 : cpu::adjoint_conv_pays() && xs[1] == 16;
      if (own_epilogue) {
        EXPECT_EQ(std::memcmp(outputs[1].raw_data(), outputs[0].raw_data(), outputs[0].nbytes()), 0)
            << "fused and apart differ on " << threads << " threads";
      }
    }
  }
}

// The convolutions cut the batch into chunks of rows fixed by the shapes (64 rows: 4 chunks of
// 16), which one thread runs in turn and a team takes one at a time, the weight and bias gradients
// summed over the chunks in order: the same bits on one thread and two, on every run whichever
// thread took which chunk; for dense, depthwise and grouped dilated convolutions.
void expect_chunks_keep_their_bits(const Shape& x_shape, const Shape& w_shape,
                                   const Conv2DAttrs& attrs) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", x_shape);
  Value w = s.placeholder("w", w_shape);
  Value b = s.placeholder("b", Shape{w_shape[0]});
  Value y = ops::relu(s, ops::bias_add(s, ops::conv2d(s, x, w, attrs), b));
  Value r = s.placeholder("r", y.shape());
  Value loss = ops::reduce_sum(s, ops::mul(s, y, r));
  std::vector<Value> fetches = {y};
  for (Value g : gradients(s, loss, {x, w, b})) fetches.push_back(g);
  Tensor xv = random_tensor(x.shape(), 1), wv = random_tensor(w.shape(), 2),
         bv = random_tensor(b.shape(), 3), rv = random_tensor(r.shape(), 4);
  VariableStore variables;
  const std::vector<std::pair<Value, const Tensor*>> feeds = {
      {x, &xv}, {w, &wv}, {b, &bv}, {r, &rv}};
  const std::vector<Tensor> one = run_once(graph, fetches, variables, feeds, 1);
  const std::vector<Tensor> two = run_once(graph, fetches, variables, feeds, 2);
  const char* names[] = {"y", "dx", "dw", "db"};
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(std::memcmp(one[i].raw_data(), two[i].raw_data(), two[i].nbytes()), 0) << names[i];
    for (int repeat = 0; repeat < 3; ++repeat) {
      const std::vector<Tensor> again = run_once(graph, fetches, variables, feeds, 2);
      EXPECT_EQ(std::memcmp(again[i].raw_data(), two[i].raw_data(), two[i].nbytes()), 0)
          << names[i] << " differs on run " << repeat;
    }
  }
}
TEST(Conv2DTest, BatchChunksOnTwoThreadsMatchOneThreadAndRepeatBitwise) {
  expect_chunks_keep_their_bits(Shape{64, 16, 8, 8}, Shape{24, 16, 3, 3}, {{1, 1}, Padding::same});
  expect_chunks_keep_their_bits(Shape{64, 32, 8, 8}, Shape{32, 1, 3, 3},
                                attrs_of({1, 1}, Padding::same, 32));
  expect_chunks_keep_their_bits(Shape{64, 16, 8, 8}, Shape{24, 4, 3, 3},
                                attrs_of({2, 2}, Padding::same, 4, {2, 2}));
}

// The filter and bias gradients of y = conv(x, w) + b for an output gradient r on 2 threads, from
// random values (seeds from `seed`), against sums in double: within `bound` of each sum's terms'
// magnitudes. On AVX2 (tower's own kernels, in fixed chunks of 16 images) the same bits on 1
// thread.
void check_filter_gradient(const ConvCase& c, uint64_t seed, double bound) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", c.x), w = s.placeholder("w", c.w);
  Value b = s.placeholder("b", Shape{c.w[0]});
  Value y = ops::bias_add(s, ops::conv2d(s, x, w, c.attrs), b);
  Value r = s.placeholder("r", y.shape());
  std::vector<Value> grads = gradients(s, ops::reduce_sum(s, ops::mul(s, y, r)), {w, b});
  Tensor xv = random_tensor(c.x, seed), wv = random_tensor(c.w, seed + 1),
         bv = random_tensor(b.shape(), seed + 2), rv = random_tensor(r.shape(), seed + 3);
  VariableStore variables;
  const std::vector<std::pair<Value, const Tensor*>> feeds = {
      {x, &xv}, {w, &wv}, {b, &bv}, {r, &rv}};
  const std::vector<Tensor> two = run_once(graph, grads, variables, feeds, 2);
  // dw[o, i, kh, kw] = sum of x[n, g(o) + i, p*s + kh*dh - top, q*t + kw*dw - left] * r[n, o, p,
  // q], g(o) the first input channel of o's group.
  const Shape& ys = r.shape();
  const auto [ph, pw] = ops::conv_padding(c.x, c.w, c.attrs);
  const int64_t per_group = c.w[0] / c.attrs.groups;
  // (and each sum's terms' magnitudes, which bound f32's rounding)
  std::vector<double> dw(static_cast<size_t>(c.w.numel())), db(static_cast<size_t>(c.w[0]));
  std::vector<double> dw_abs(dw.size()), db_abs(db.size());
  const float* xp = xv.data<float>();
  const float* rp = rv.data<float>();
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t o = 0; o < ys[1]; ++o)
      for (int64_t p = 0; p < ys[2]; ++p)
        for (int64_t q = 0; q < ys[3]; ++q) {
          const double g = rp[((n * ys[1] + o) * ys[2] + p) * ys[3] + q];
          db[static_cast<size_t>(o)] += g;
          db_abs[static_cast<size_t>(o)] += std::fabs(g);
          for (int64_t i = 0; i < c.w[1]; ++i)
            for (int64_t kh = 0; kh < c.w[2]; ++kh)
              for (int64_t kw = 0; kw < c.w[3]; ++kw) {
                const int64_t h = p * c.attrs.strides[0] + kh * c.attrs.dilations[0] - ph.before;
                const int64_t v = q * c.attrs.strides[1] + kw * c.attrs.dilations[1] - pw.before;
                if (h < 0 || h >= c.x[2] || v < 0 || v >= c.x[3]) continue;
                const int64_t channel = o / per_group * c.w[1] + i;
                const size_t at =
                    static_cast<size_t>(((o * c.w[1] + i) * c.w[2] + kh) * c.w[3] + kw);
                const double term = g * xp[((n * c.x[1] + channel) * c.x[2] + h) * c.x[3] + v];
                dw[at] += term;
                dw_abs[at] += std::fabs(term);
              }
        }
  const std::vector<double>* expected[] = {&dw, &db};
  const std::vector<double>* magnitudes[] = {&dw_abs, &db_abs};
  for (size_t k = 0; k < 2; ++k) {
    const float* got = two[k].data<float>();
    for (size_t e = 0; e < expected[k]->size(); ++e)
      ASSERT_NEAR(got[e], (*expected[k])[e], bound * (*magnitudes[k])[e] + 1e-6)
          << (k == 0 ? "dw" : "db") << " element " << e;
  }
  if (cpu_isa() >= CpuIsa::avx512) return;  // oneDNN's kernel, whose chunks follow the team
  const std::vector<Tensor> one = run_once(graph, grads, variables, feeds, 1);
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(std::memcmp(one[k].raw_data(), two[k].raw_data(), two[k].nbytes()), 0)
        << (k == 0 ? "dw" : "db") << " on 1 and 2 threads";
}

// The filter and bias gradients of convolutions with 1 to 4 input channels (a first layer; on AVX2
// a hand-written kernel): every filter width up to 7 and beyond, strides, both paddings, output
// channels that do not fill a vector, and a batch that is not a whole number of chunks.
TEST(Conv2DTest, FewInputChannelsFilterGradientMatchesSumsInDouble) {
  const ConvCase cases[] = {
      {{37, 1, 28, 28}, {32, 1, 5, 5}, {{1, 1}, Padding::same}},
      {{20, 3, 13, 11}, {12, 3, 3, 3}, {{2, 1}, Padding::same}},
      {{17, 2, 9, 12}, {5, 2, 4, 7}, {{1, 2}, Padding::valid}},
      {{3, 4, 8, 8}, {16, 4, 2, 1}, {{1, 1}, Padding::same}},
      {{18, 1, 10, 14}, {8, 1, 3, 6}, {{3, 2}, Padding::same}},
      {{2, 1, 12, 12}, {9, 1, 3, 9}, {{1, 1}, Padding::same}},
  };
  uint64_t seed = 300;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.x.to_string() + " * " + c.w.to_string());
    check_filter_gradient(c, seed, 1e-6);
    seed += 4;
  }
}

// The filter and bias gradients of 3x3 stride-1 SAME convolutions with 16 channels or more (under
// AVX2 by Winograd's F(2x2, 3x3), conv_filter_grad_winograd.cc, whose transforms round more): odd
// planes (tiles past the border), output channels that the product's rows of 6 do not divide, and
// batches that are not a whole number of chunks.
TEST(Conv2DTest, SameConvolutionFilterGradientMatchesSumsInDouble) {
  const ConvCase cases[] = {
      {{37, 16, 9, 7}, {16, 16, 3, 3}, {{1, 1}, Padding::same}},
      {{5, 32, 9, 7}, {32, 32, 3, 3}, {{1, 1}, Padding::same}},
      {{18, 32, 8, 8}, {40, 32, 3, 3}, {{1, 1}, Padding::same}},
      {{17, 32, 14, 14}, {64, 32, 3, 3}, {{1, 1}, Padding::same}},
      {{3, 48, 5, 3}, {32, 48, 3, 3}, {{1, 1}, Padding::same}},
      // depthwise and grouped dilated, in oneDNN's blocked kernels
      {{16, 32, 12, 12}, {32, 1, 3, 3}, attrs_of({1, 1}, Padding::same, 32)},
      {{16, 32, 12, 12}, {32, 1, 3, 3}, attrs_of({2, 2}, Padding::same, 32)},
      {{16, 32, 12, 12}, {64, 4, 3, 3}, attrs_of({1, 1}, Padding::same, 8, {2, 2})},
  };
  uint64_t seed = 400;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.x.to_string() + " * " + c.w.to_string());
    check_filter_gradient(c, seed, 1e-5);
    seed += 4;
  }
}

}  // namespace
}  // namespace tower
