// --precision bf16: convolutions and matrix products multiply bf16 copies of their operands and
// accumulate in f32; every value between kernels stays f32. Forward values and gradients must
// match the fp32 program within bf16's precision (8 bits of mantissa).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "tower/graph/gradients.h"
#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/pool.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

std::vector<Tensor> run(const Graph& graph, const std::vector<Value>& fetches,
                        VariableStore& variables,
                        const std::vector<std::pair<Value, Tensor>>& feeds, Precision precision,
                        bool fuse = true, ProgramStats* stats = nullptr, Device device = {}) {
  ProgramOptions options{device, 2};
  options.precision = precision;
  options.fuse = fuse;
  Program program(graph, fetches, variables, options);
  if (stats != nullptr) *stats = program.stats();
  for (const auto& [placeholder, value] : feeds) program.input(placeholder).copy_from(value);
  program.run();
  std::vector<Tensor> out;
  for (int i = 0; i < program.num_fetches(); ++i) {
    out.emplace_back(program.output(i).shape(), program.output(i).dtype());  // on the host
    out.back().copy_from(program.output(i));
  }
  return out;
}

struct Difference {
  double max_relative = 0;  // largest |bf16 - fp32| over the largest |fp32|
  double l2_relative = 0;   // ||bf16 - fp32|| / ||fp32||
};
Difference difference(const Tensor& fp32, const Tensor& bf16) {
  double scale = 0, norm = 0, err = 0, worst = 0;
  for (int64_t k = 0; k < fp32.numel(); ++k) {
    const double a = fp32.data<float>()[k], b = bf16.data<float>()[k];
    scale = std::max(scale, std::fabs(a));
    norm += a * a;
    err += (a - b) * (a - b);
    worst = std::max(worst, std::fabs(a - b));
  }
  EXPECT_GT(scale, 0) << "all zeros: the comparison would prove nothing";
  return {worst / scale, std::sqrt(err / norm)};
}

// The clear error a CPU without bf16 instructions gives; true when the test can go on.
bool bf16_or_its_error(const Graph& graph, const std::vector<Value>& fetches,
                       VariableStore& variables) {
  if (testing::cpu_has_bf16()) return true;
  ProgramOptions options{Device{}, 2};
  options.precision = Precision::bf16;
  try {
    Program program(graph, fetches, variables, options);
    ADD_FAILURE() << "a CPU without bf16 instructions built a bf16 program";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16 needs a CPU with AVX512-BF16 or AMX"),
              std::string::npos)
        << e.what();
  }
  return false;
}

// A convolution and a matmul with their gradients, and the feeds: Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter, MatMul and its two gradient forms (of sum(conv(x, w) * r) +
// sum(matmul(a, b) * q)).
struct ConvAndMatMul {
  Graph graph;
  std::vector<Value> fetches;
  VariableStore variables;
  std::vector<std::pair<Value, Tensor>> feeds;
  static constexpr const char* kNames[] = {
      "Conv2D",          "MatMul",         "Conv2DBackpropInput", "Conv2DBackpropFilter",
      "MatMul (dy b^T)", "MatMul (a^T dy)"};

  ConvAndMatMul() {
    Scope s(graph);
    Value x = s.placeholder("x", Shape{4, 8, 12, 12}), r = s.placeholder("r", Shape{4, 16, 12, 12});
    Value a = s.placeholder("a", Shape{32, 72}), q = s.placeholder("q", Shape{32, 24});
    Value w = s.get_variable("w", Shape{16, 8, 3, 3}, Initializer::he_normal());
    Value b = s.get_variable("b", Shape{72, 24}, Initializer::glorot_uniform());
    Value y = ops::conv2d(s, x, w, {{1, 1}, ops::Padding::same});
    Value z = ops::matmul(s, a, b);
    Value loss =
        ops::add(s, ops::reduce_sum(s, ops::mul(s, y, r)), ops::reduce_sum(s, ops::mul(s, z, q)));
    fetches = {y, z};
    for (Value g : gradients(s, loss, {x, w, a, b})) fetches.push_back(g);
    variables.initialize(graph, 5);
    uint64_t seed = 1;
    for (Value v : {x, r, a, q}) feeds.emplace_back(v, testing::random_tensor(v.shape(), seed++));
  }

  // bf16 against fp32, output by output.
  static void expect_within_bf16(const std::vector<Tensor>& fp32, const std::vector<Tensor>& bf16) {
    for (size_t i = 0; i < fp32.size(); ++i) {
      const Difference d = difference(fp32[i], bf16[i]);
      std::printf("%-22s max %.2e  l2 %.2e\n", kNames[i], d.max_relative, d.l2_relative);
      EXPECT_LT(d.max_relative, 2e-2) << kNames[i];
      EXPECT_GT(d.max_relative, 1e-5) << kNames[i] << ": no bf16 rounding at all: did bf16 run?";
    }
  }
};

// Each bf16 kernel alone against its fp32 twin: Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter (the gradients of sum(conv(x, w) * r)), MatMul and its two transposed
// forms (the gradients of sum(matmul(a, b) * q)). Operands rounded to bf16 (8 bits of mantissa)
// and f32 accumulation give errors of a few 1e-3 of the largest output.
TEST(PrecisionTest, Bf16KernelsMatchFp32KernelsForwardAndGradient) {
  ConvAndMatMul c;
  if (!bf16_or_its_error(c.graph, c.fetches, c.variables))
    GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error)";
  ConvAndMatMul::expect_within_bf16(run(c.graph, c.fetches, c.variables, c.feeds, Precision::fp32),
                                    run(c.graph, c.fetches, c.variables, c.feeds, Precision::bf16));
}

// The filter and bias gradients of sum(bias_add(conv(x, w), b) * r) in bf16 against fp32, on each
// path of the CPU kernel (Conv2DBackpropFilter+BiasAddGrad): on a CPU with AMX, stride 1 and 16
// input channels or more take the forward-convolution form, one chunk (4 rows) or two (128 rows,
// added in order); 8 channels, strides and a batch of 96 (not a multiple of 64) take oneDNN's
// backward-weights kernel.
TEST(PrecisionTest, Bf16FilterGradientsMatchFp32OnEveryPath) {
  struct Case {
    Shape x, w;
    ops::Conv2DAttrs attrs;
  };
  const Case cases[] = {
      {Shape{4, 16, 12, 12}, Shape{8, 16, 3, 3}, {{1, 1}, ops::Padding::same}},
      {Shape{128, 32, 8, 8}, Shape{16, 32, 5, 3}, {{1, 1}, ops::Padding::valid}},
      {Shape{128, 16, 9, 7}, Shape{16, 16, 5, 5}, {{1, 1}, ops::Padding::same}},
      {Shape{96, 16, 8, 8}, Shape{16, 16, 3, 3}, {{1, 1}, ops::Padding::same}},
      {Shape{8, 8, 12, 12}, Shape{16, 8, 3, 3}, {{1, 1}, ops::Padding::same}},
      {Shape{8, 16, 12, 12}, Shape{16, 16, 3, 3}, {{2, 2}, ops::Padding::same}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << c.x.to_string() << ", w " << c.w.to_string()
                                      << ", stride " << c.attrs.strides[0]);
    Graph graph;
    Scope s(graph);
    Value x = s.placeholder("x", c.x);
    Value w = s.get_variable("w", c.w, Initializer::he_normal());
    Value b = s.get_variable("b", Shape{c.w[0]}, Initializer::glorot_uniform());
    Value y = ops::bias_add(s, ops::conv2d(s, x, w, c.attrs), b);
    Value r = s.placeholder("r", y.shape());
    std::vector<Value> fetches = gradients(s, ops::reduce_sum(s, ops::mul(s, y, r)), {w, b});
    VariableStore variables;
    variables.initialize(graph, 3);
    if (!bf16_or_its_error(graph, fetches, variables))
      GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error)";
    std::vector<std::pair<Value, Tensor>> feeds;
    feeds.emplace_back(x, testing::random_tensor(x.shape(), 1));
    feeds.emplace_back(r, testing::random_tensor(r.shape(), 2));
    const std::vector<Tensor> fp32 = run(graph, fetches, variables, feeds, Precision::fp32);
    const std::vector<Tensor> bf16 = run(graph, fetches, variables, feeds, Precision::bf16);
    for (size_t i = 0; i < fp32.size(); ++i) {
      const Difference d = difference(fp32[i], bf16[i]);
      EXPECT_LT(d.max_relative, 2e-2) << (i == 0 ? "dw" : "db");
      EXPECT_LT(d.l2_relative, 1e-2) << (i == 0 ? "dw" : "db");
    }
  }
}

// The same on a GPU (cuDNN's and cuBLAS's bf16 with f32 accumulation) against the CPU's fp32
// kernels; a GPU older than compute capability 8.0 gives the clear error instead.
TEST(PrecisionTest, GpuBf16KernelsMatchFp32KernelsForwardAndGradient) {
  std::string why;
  if (!testing::have_gpu(why)) GTEST_SKIP() << why;
  const Device gpu{DeviceKind::cuda, 0};
  ConvAndMatMul c;
  VariableStore gpu_variables(gpu);
  gpu_variables.initialize(c.graph, 5);
  gpu_variables.copy_from(c.variables);
  if (cuda_devices()[0].major < 8) {
    EXPECT_THROW(
        run(c.graph, c.fetches, gpu_variables, c.feeds, Precision::bf16, true, nullptr, gpu),
        Error);
    GTEST_SKIP() << "this GPU has no bf16 tensor cores (checked: the clear error)";
  }
  ConvAndMatMul::expect_within_bf16(
      run(c.graph, c.fetches, c.variables, c.feeds, Precision::fp32),
      run(c.graph, c.fetches, gpu_variables, c.feeds, Precision::bf16, true, nullptr, gpu));
}

// The bf16 copies of the operands round to the nearest bf16, ties to even (as oneDNN's reorder and
// TensorFlow): a times the identity gives exactly bf16(a). 3 x 37 values, so the conversion's
// 32-value vectors leave a tail; ties between two bf16 values go both ways.
TEST(PrecisionTest, Bf16OperandsAreRoundedToTheNearestEven) {
  constexpr int64_t kRows = 3, kCols = 37;
  Graph graph;
  Scope s(graph);
  Value a = s.placeholder("a", Shape{kRows, kCols});
  Value eye = s.get_variable("eye", Shape{kCols, kCols}, Initializer::zeros());
  Value z = ops::matmul(s, a, eye);
  VariableStore variables;
  variables.initialize(graph, 1);
  for (int64_t i = 0; i < kCols; ++i) variables.get("eye").data<float>()[i * kCols + i] = 1.0f;
  if (!bf16_or_its_error(graph, {z}, variables))
    GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error)";
  Tensor values = testing::random_tensor(a.shape(), 9);
  float* v = values.data<float>();
  const float ties[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -1.0f - 0x1p-8f, 3.0e38f, -0.0f, 1e-30f};
  std::copy(std::begin(ties), std::end(ties), v);
  std::copy(std::begin(ties), std::end(ties), v + values.numel() - 6);
  std::vector<std::pair<Value, Tensor>> feeds;
  feeds.emplace_back(a, std::move(values));
  v = feeds[0].second.data<float>();
  const auto out = run(graph, {z}, variables, feeds, Precision::bf16);
  for (int64_t k = 0; k < values.numel(); ++k)
    EXPECT_EQ(out[0].data<float>()[k], bf16_to_f32(f32_to_bf16(v[k]))) << k << ": " << v[k];
  EXPECT_EQ(out[0].data<float>()[0], 1.0f);            // the tie to the even 1.0
  EXPECT_EQ(out[0].data<float>()[1], 1.0f + 0x1p-6f);  // the tie up to the even neighbour
}

// A small network end to end: ReLU and max pooling route gradients by comparisons, which bf16
// can flip for single elements, so the gradients are compared as whole tensors (L2). Measured on
// a Xeon with AMX: 4e-3 for the logits, 2e-2 for the last layers' gradients and 8e-2 for the
// first layer's and the images' (behind two ReLUs and a max pooling).
TEST(PrecisionTest, Bf16NetworkMatchesFp32WithinBf16Precision) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{8, 3, 16, 16});
  Value w1 = s.get_variable("w1", Shape{16, 3, 5, 5}, Initializer::he_normal());
  Value b1 = s.get_variable("b1", Shape{16}, Initializer::uniform(0.5f));
  Value w2 = s.get_variable("w2", Shape{24, 16, 3, 3}, Initializer::he_normal());
  Value w3 = s.get_variable("w3", Shape{24 * 8 * 8, 10}, Initializer::glorot_uniform());
  const ops::Conv2DAttrs same{{1, 1}, ops::Padding::same};
  Value h1 = ops::relu(s, ops::bias_add(s, ops::conv2d(s, images, w1, same), b1));
  Value p1 = ops::max_pool(s, h1, {{2, 2}, {2, 2}, ops::Padding::valid});
  Value h2 = ops::relu(s, ops::conv2d(s, p1, w2, same));
  Value logits = ops::matmul(s, ops::reshape(s, h2, Shape{8, 24 * 8 * 8}), w3);
  Value loss = ops::l2_loss(s, logits);
  std::vector<Value> fetches = {loss, logits};
  for (Value g : gradients(s, loss, {images, w1, b1, w2, w3})) fetches.push_back(g);
  VariableStore variables;
  variables.initialize(graph, 11);
  if (!bf16_or_its_error(graph, fetches, variables))
    GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error)";
  std::vector<std::pair<Value, Tensor>> feeds;
  feeds.emplace_back(images, testing::random_tensor(images.shape(), 3));
  const auto fp32 = run(graph, fetches, variables, feeds, Precision::fp32);
  const auto bf16 = run(graph, fetches, variables, feeds, Precision::bf16);
  const char* names[] = {"loss", "logits", "d images", "d w1", "d b1", "d w2", "d w3"};
  for (size_t i = 0; i < fp32.size(); ++i) {
    const Difference d = difference(fp32[i], bf16[i]);
    std::printf("%-9s max %.2e  l2 %.2e\n", names[i], d.max_relative, d.l2_relative);
    EXPECT_LT(d.l2_relative, i < 2 ? 1e-2 : 0.15) << names[i];
  }
}

// The gradient of conv -> bias -> ReLU -> max pooling with respect to the weights: the pooling
// gradient (with the ReLU's) writes the bf16 copy of dy that the weight gradient (with the bias
// gradient) reads, instead of an f32 dy converted afterwards; as without fusion, within bf16's
// precision.
TEST(PrecisionTest, PoolingGradientWritesTheBf16CopyThatTheWeightGradientReads) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{8, 3, 16, 16});
  Value w = s.get_variable("w", Shape{32, 3, 5, 5}, Initializer::he_normal());
  Value b = s.get_variable("b", Shape{32}, Initializer::uniform(0.5f));
  Value h =
      ops::relu(s, ops::bias_add(s, ops::conv2d(s, images, w, {{1, 1}, ops::Padding::same}), b));
  Value loss = ops::l2_loss(s, ops::max_pool(s, h, {{3, 3}, {2, 2}, ops::Padding::same}));
  std::vector<Value> fetches = {loss};
  for (Value g : gradients(s, loss, {w, b})) fetches.push_back(g);
  VariableStore variables;
  variables.initialize(graph, 12);
  if (!bf16_or_its_error(graph, fetches, variables))
    GTEST_SKIP() << "this CPU has no bf16 instructions (checked: the clear error)";
  std::vector<std::pair<Value, Tensor>> feeds;
  feeds.emplace_back(images, testing::random_tensor(images.shape(), 5));
  ProgramStats fused_stats, separate_stats;
  const auto fused = run(graph, fetches, variables, feeds, Precision::bf16, true, &fused_stats);
  const auto separate =
      run(graph, fetches, variables, feeds, Precision::bf16, false, &separate_stats);
  EXPECT_EQ(fused_stats.folded_conversions, 1);
  EXPECT_EQ(separate_stats.folded_conversions, 0);
  const char* names[] = {"loss", "d w", "d b"};
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_LT(difference(separate[i], fused[i]).l2_relative, 1e-2) << names[i];
}

TEST(PrecisionTest, NamesParseAndPrint) {
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_EQ(precision_name(parse_precision("fp32")), "fp32");
  EXPECT_THROW(parse_precision("fp16"), Error);
}

}  // namespace
}  // namespace tower
