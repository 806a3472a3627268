// Layout propagation: values stay in oneDNN's blocked layouts between kernels that accept them.
// Whatever the layouts inside, a Program must compute what the all-plain Program computes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>

#include "testing/gradient_check.h"
#include "testing/kernel_runner.h"
#include "tower/core/device.h"
#include "tower/graph/gradients.h"
#include "tower/ops/activation.h"
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/lrn.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/pool.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

// conv -> bias -> relu -> max-pool -> conv -> bias -> relu -> conv -> batch norm -> relu, plus a
// residual add (so a value fans out and its gradients meet in an AddN) and an LRN branch (a
// hand-written kernel, on the pooling's 16-channel blocks with AVX-512). 24 channels: blocked
// layouts are padded to 32.
struct ChainGraph {
  Graph graph;
  Value images;
  std::vector<Value> fetches;  // loss, two intermediate activations, then the gradients
  VariableStore variables;

  ChainGraph() {
    Scope s(graph);
    images = s.placeholder("images", Shape{4, 3, 12, 12});
    auto weights = [&](const std::string& name, Shape shape) {
      return s.get_variable(name, std::move(shape), Initializer::he_normal());
    };
    auto bias = [&](const std::string& name, int64_t n) {
      return s.get_variable(name, Shape{n}, Initializer::uniform(0.5f));
    };
    Value w1 = weights("w1", Shape{16, 3, 3, 3}), b1 = bias("b1", 16);
    Value w2 = weights("w2", Shape{24, 16, 3, 3}), b2 = bias("b2", 24);
    Value w3 = weights("w3", Shape{24, 24, 3, 3});
    Value gamma = bias("gamma", 24), beta = bias("beta", 24);
    Value mean = s.get_variable("mean", Shape{24}, Initializer::zeros(), Trainable::no);
    Value var = s.get_variable("var", Shape{24}, Initializer::ones(), Trainable::no);
    const ops::Conv2DAttrs same{{1, 1}, ops::Padding::same};

    Value h1 = ops::relu(s, ops::bias_add(s, ops::conv2d(s, images, w1, same), b1));
    Value p1 = ops::max_pool(s, h1, {{2, 2}, {2, 2}, ops::Padding::valid});
    Value h2 = ops::relu(s, ops::bias_add(s, ops::conv2d(s, p1, w2, same), b2));
    Value h3 = ops::relu(
        s, ops::batch_norm(s, ops::conv2d(s, h2, w3, same), gamma, beta, mean, var, {}).y);
    Value sum = ops::relu(s, ops::add(s, h3, h2));
    Value normed = ops::lrn(s, p1, {});
    Value loss = ops::add(s, ops::l2_loss(s, sum), ops::l2_loss(s, normed));

    fetches = {loss, sum, p1};
    for (Value g : gradients(s, loss, {images, w1, b1, w2, b2, w3, gamma, beta}))
      fetches.push_back(g);
    variables.initialize(graph, 3);
  }
};

// Compiles `fetches` with `options`, feeds `input` to `placeholder`, runs `runs` times (buffers
// reused between steps must not leak stale layouts); returns copies of the fetches (and the
// stats).
std::vector<Tensor> run_program(const Graph& graph, const std::vector<Value>& fetches,
                                VariableStore& variables, ProgramOptions options, Value placeholder,
                                const Tensor& input, ProgramStats* stats = nullptr, int runs = 1) {
  Program program(graph, fetches, variables, options);
  program.input(placeholder).copy_from(input);
  for (int r = 0; r < runs; ++r) program.run();
  if (stats != nullptr) *stats = program.stats();
  std::vector<Tensor> out;
  for (int i = 0; i < program.num_fetches(); ++i) out.push_back(program.output(i).clone());
  return out;
}

// Runs the chain graph twice with or without propagation (and fusion).
std::vector<Tensor> run_chain(ChainGraph& c, bool propagate, ProgramStats* stats,
                              bool fuse = true) {
  return run_program(c.graph, c.fetches, c.variables, {Device{}, 2, propagate, fuse}, c.images,
                     testing::random_tensor(Shape{4, 3, 12, 12}, 5), stats, 2);
}

// The fetches run without and with fusion (layouts propagated or not): the same bits. Returns the
// two programs' statistics (without, with).
std::pair<ProgramStats, ProgramStats> expect_fusion_keeps_bits(const Graph& graph,
                                                               const std::vector<Value>& fetches,
                                                               VariableStore& variables,
                                                               bool propagate, Value placeholder,
                                                               const Tensor& input) {
  ProgramStats separate, fused;
  const std::vector<Tensor> a = run_program(
      graph, fetches, variables, {Device{}, 2, propagate, false}, placeholder, input, &separate);
  const std::vector<Tensor> b = run_program(
      graph, fetches, variables, {Device{}, 2, propagate, true}, placeholder, input, &fused);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()), 0) << "fetch " << i;
  return {separate, fused};
}

// Every fetch within 1e-5 of its largest element (f32 rounding in another order).
void expect_close(const std::vector<Tensor>& expected, const std::vector<Tensor>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].shape(), actual[i].shape()) << "fetch " << i;
    const float* a = expected[i].data<float>();
    const float* b = actual[i].data<float>();
    float scale = 0;
    for (int64_t k = 0; k < expected[i].numel(); ++k) scale = std::max(scale, std::fabs(a[k]));
    ASSERT_GT(scale, 0.0f) << "fetch " << i << " is all zeros: the test would prove nothing";
    for (int64_t k = 0; k < expected[i].numel(); ++k)
      ASSERT_NEAR(a[k], b[k], 1e-5f * scale) << "fetch " << i << " element " << k;
  }
}

TEST(LayoutTest, PropagationKeepsResultsAndSavesReorders) {
  ChainGraph c;
  ProgramStats plain_stats, blocked_stats;
  std::vector<Tensor> plain = run_chain(c, false, &plain_stats);
  std::vector<Tensor> blocked = run_chain(c, true, &blocked_stats);
  expect_close(plain, blocked);
  // Both have the same kernels; propagation removes the conversions between the oneDNN ones.
  EXPECT_EQ(blocked_stats.num_kernels, plain_stats.num_kernels);
  EXPECT_LT(blocked_stats.reorders, plain_stats.reorders);
  EXPECT_GT(plain_stats.reorders, 0);
}

// Fusion (ProgramOptions::fuse): both conv -> bias -> relu chains run as one oneDNN primitive
// with a bias and a ReLU post-op, and the max-pooling gradient takes the ReLU gradient after it;
// forward and every gradient as without fusion.
TEST(LayoutTest, FusionKeepsResultsAndRunsFewerKernels) {
  ChainGraph c;
  ProgramStats separate, fused;
  std::vector<Tensor> a = run_chain(c, true, &separate, false);
  std::vector<Tensor> b = run_chain(c, true, &fused, true);
  expect_close(a, b);
  EXPECT_EQ(separate.fused_nodes, 0);
  // Two Conv2D and two BiasAdd inside Conv2D+BiasAdd+Relu, a MaxPoolGrad inside
  // MaxPoolGrad+ReluGrad, both bias gradients inside the filter gradients of their layers
  // (Conv2DBackpropFilter+BiasAddGrad), a ReLU inside FusedBatchNorm+Relu and its gradient inside
  // ReluGrad+FusedBatchNormGrad, the residual sum's ReLU inside Add+Relu and h2's ReLU gradient
  // inside the sum of its two gradients (AddN+ReluGrad).
  EXPECT_EQ(fused.fused_nodes, 11);
  EXPECT_EQ(fused.num_kernels, separate.num_kernels - 11);
}

// Inference batch norms folded into their convolutions (Conv2D+FusedBatchNorm+Relu, and
// Conv2D+FusedBatchNorm+Add+Relu at a residual add): the same results as the kernels apart
// within f32 rounding (the fold scales the weights instead of the convolution's output: not the
// same bits), with plain and propagated layouts, run after run (the fold is redone each run).
TEST(LayoutTest, InferenceBatchNormFoldedIntoTheConvolutionKeepsResults) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{4, 3, 12, 12});
  auto variable = [&](const std::string& name, Shape shape, Trainable trainable = Trainable::yes) {
    return s.get_variable(name, std::move(shape), Initializer::he_normal(), trainable);
  };
  const ops::Conv2DAttrs same{{1, 1}, ops::Padding::same};
  const ops::BatchNormAttrs inference{.mode = ops::BatchNormMode::inference};
  auto conv_bn = [&](const std::string& name, Value x, int64_t in, int64_t out) {
    Value w = variable(name + "/w", Shape{out, in, 3, 3});
    return ops::batch_norm(s, ops::conv2d(s, x, w, same), variable(name + "/gamma", Shape{out}),
                           variable(name + "/beta", Shape{out}),
                           variable(name + "/mean", Shape{out}, Trainable::no),
                           variable(name + "/var", Shape{out}, Trainable::no), inference)
        .y;
  };
  Value h = ops::relu(s, conv_bn("a", images, 3, 24));
  Value g = ops::relu(s, ops::add(s, conv_bn("b", h, 24, 24), h));
  // 32 channels: the Winograd kernels (conv_winograd.cc under AVX2, oneDNN's on AVX-512 AMD)
  Value k = ops::relu(s, conv_bn("c", g, 24, 32));
  Value y = ops::relu(s, ops::add(s, conv_bn("d", k, 32, 32), k));
  VariableStore variables;
  variables.initialize(graph, 4);
  for (const char* name : {"a/var", "b/var", "c/var", "d/var"}) {  // variances in [0.5, 1.5]
    Tensor& v = variables.get(name);
    for (int64_t c = 0; c < v.numel(); ++c)
      v.data<float>()[c] = 0.5f + static_cast<float>((c * 7) % 11) / 10.0f;
  }
  const Tensor input = testing::random_tensor(Shape{4, 3, 12, 12}, 6);
  for (bool propagate : {false, true}) {
    ProgramStats separate, fused;
    std::vector<Tensor> a = run_program(graph, {y}, variables, {Device{}, 2, propagate, false},
                                        images, input, &separate, 2);
    std::vector<Tensor> b = run_program(graph, {y}, variables, {Device{}, 2, propagate, true},
                                        images, input, &fused, 2);
    expect_close(a, b);
    EXPECT_EQ(fused.fused_nodes, 10) << "a, c: conv and batch norm under the ReLU; b, d: conv, "
                                        "batch norm and add under the ReLU";
  }
  if (!testing::cpu_has_bf16()) return;
  // bf16: the folded weights are rounded to bf16 instead of the unfolded ones; within 2% of the
  // largest output.
  ProgramOptions bf16{Device{}, 2};
  bf16.precision = Precision::bf16;
  ProgramOptions bf16_separate = bf16;
  bf16_separate.fuse = false;
  const std::vector<Tensor> a = run_program(graph, {y}, variables, bf16_separate, images, input);
  const std::vector<Tensor> b = run_program(graph, {y}, variables, bf16, images, input);
  float scale = 0;
  for (int64_t k = 0; k < a[0].numel(); ++k)
    scale = std::max(scale, std::fabs(a[0].data<float>()[k]));
  for (int64_t k = 0; k < a[0].numel(); ++k)
    ASSERT_NEAR(a[0].data<float>()[k], b[0].data<float>()[k], 0.02f * scale) << k;
}

// A training batch norm with its ReLU in one pass (FusedBatchNorm+Relu), and its gradient with the
// ReLU's (ReluGrad+FusedBatchNormGrad); or, at a residual block's end, with the shortcut added
// before the ReLU (FusedBatchNorm+Add+Relu): the same bits as the kernels apart, forward and
// gradients, with the statistics still reaching the gradient.
TEST(LayoutTest, BatchNormTakesItsReluWithTheSameBits) {
  // x plain (oneDNN's batch norm; the gradient masks dy into scratch first, the sum follows the
  // batch norm) and in a convolution's blocked layout (the channel groups, masking and adding in
  // their passes; the shortcut, plain, converted to x's layout).
  for (const auto& [blocked, residual] : {std::pair{false, false}, std::pair{true, false},
                                          std::pair{false, true}, std::pair{true, true}}) {
    SCOPED_TRACE(::testing::Message()
                 << (blocked ? "blocked" : "plain") << (residual ? ", residual" : ""));
    Graph graph;
    Scope s(graph);
    Value images = s.placeholder("x", Shape{8, 16, 6, 6});
    auto channel = [&](const std::string& name, Trainable trainable = Trainable::yes) {
      return s.get_variable(name, Shape{16}, Initializer::uniform(0.5f), trainable);
    };
    Value x = images;
    if (blocked)
      x = ops::conv2d(s, images, s.get_variable("w", Shape{16, 16, 1, 1}, Initializer::he_normal()),
                      {{1, 1}, ops::Padding::valid});
    Value gamma = channel("gamma"), beta = channel("beta");
    Value y = ops::batch_norm(s, x, gamma, beta, channel("mean", Trainable::no),
                              channel("var", Trainable::no), {})
                  .y;
    y = ops::relu(s, residual ? ops::add(s, y, images) : y);
    Value loss = ops::l2_loss(s, y);
    std::vector<Value> fetches = {loss, y};
    for (Value g : gradients(s, loss, {images, gamma, beta})) fetches.push_back(g);
    VariableStore variables;
    variables.initialize(graph, 5);
    const Tensor input = testing::random_tensor(Shape{8, 16, 6, 6}, 7);
    const auto [separate, fused] =
        expect_fusion_keeps_bits(graph, fetches, variables, true, images, input);
    // FusedBatchNorm+Relu and ReluGrad+FusedBatchNormGrad, or the Add and the ReLU inside
    // FusedBatchNorm+Add+Relu
    EXPECT_EQ(fused.fused_nodes, 2);
  }
}

// A training residual block, x -> relu(conv) = h -> relu(conv(h) + h): the sum and its ReLU run as
// one kernel (Add+Relu), and so do h's two gradients summed and ReLU's gradient (AddN+ReluGrad).
// The same bits as the kernels apart, forward and gradients, on plain and blocked layouts.
TEST(LayoutTest, ResidualSumsTakeTheirReluWithTheSameBits) {
  for (bool propagate : {false, true}) {
    SCOPED_TRACE(propagate ? "blocked" : "plain");
    Graph graph;
    Scope s(graph);
    Value images = s.placeholder("x", Shape{4, 16, 6, 6});
    auto conv = [&](const std::string& name, Value x) {
      Value w = s.get_variable(name, Shape{16, 16, 3, 3}, Initializer::he_normal());
      return ops::conv2d(s, x, w, {{1, 1}, ops::Padding::same});
    };
    Value h = ops::relu(s, conv("a", images));
    Value y = ops::relu(s, ops::add(s, conv("b", h), h));
    Value loss = ops::l2_loss(s, ops::scale(s, y, 0.5f));
    std::vector<Value> fetches = {loss, y};
    for (Value g : gradients(s, loss, {images})) fetches.push_back(g);
    VariableStore variables;
    variables.initialize(graph, 8);
    const Tensor input = testing::random_tensor(Shape{4, 16, 6, 6}, 9);
    const auto [separate, fused] =
        expect_fusion_keeps_bits(graph, fetches, variables, propagate, images, input);
    EXPECT_EQ(fused.fused_nodes, 2);  // Add+Relu, AddN+ReluGrad
    EXPECT_EQ(fused.num_kernels, separate.num_kernels - 2);
  }
}

// MatMul -> BiasAdd -> Relu and MatMul -> BiasAdd fuse; a chain whose middle value is read
// elsewhere (here: fetched) does not.
TEST(LayoutTest, MatMulChainsFuseUnlessAValueIsReadElsewhere) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", Shape{8, 20});
  Value w1 = s.get_variable("w1", Shape{20, 16}, Initializer::he_normal());
  Value w2 = s.get_variable("w2", Shape{16, 5}, Initializer::he_normal());
  Value b1 = s.get_variable("b1", Shape{16}, Initializer::uniform(0.5f));
  Value b2 = s.get_variable("b2", Shape{5}, Initializer::uniform(0.5f));
  Value pre = ops::bias_add(s, ops::matmul(s, x, w1), b1);
  Value h = ops::relu(s, pre);
  Value logits = ops::bias_add(s, ops::matmul(s, h, w2), b2);
  Value loss = ops::l2_loss(s, logits);
  std::vector<Value> fetches = {loss, logits};
  for (Value g : gradients(s, loss, {x, w1, b1, w2, b2})) fetches.push_back(g);
  VariableStore variables;
  variables.initialize(graph, 6);
  const Tensor input = testing::random_tensor(Shape{8, 20}, 2);
  auto run = [&](const std::vector<Value>& f, bool fuse, ProgramStats* stats) {
    return run_program(graph, f, variables, {Device{}, 2, true, fuse}, x, input, stats);
  };
  ProgramStats separate, fused, fetched;
  expect_close(run(fetches, false, &separate), run(fetches, true, &fused));
  EXPECT_EQ(fused.fused_nodes, 3);  // MatMul+BiasAdd+Relu, MatMul+BiasAdd
  std::vector<Value> with_pre = fetches;
  with_pre.push_back(pre);
  run(with_pre, true, &fetched);
  EXPECT_EQ(fetched.fused_nodes, 2);  // MatMul+BiasAdd, then Relu; and the second chain
}

// A weight decay term (the gradient of wd * L2Loss(w): w times a scalar) and the gradient it is
// added to become one kernel (Mul+AddN), whose result has the bits of the two; not when the
// term is also read elsewhere (here: fetched).
TEST(LayoutTest, WeightDecayFusesIntoTheGradientSum) {
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", Shape{8, 20});
  Value w = s.get_variable("w", Shape{20, 5}, Initializer::he_normal());
  Value loss =
      ops::add(s, ops::l2_loss(s, ops::matmul(s, x, w)), ops::scale(s, ops::l2_loss(s, w), 0.004f));
  std::vector<Value> fetches = {loss, gradients(s, loss, {w})[0]};
  VariableStore variables;
  variables.initialize(graph, 6);
  const Tensor input = testing::random_tensor(Shape{8, 20}, 2);
  auto run = [&](const std::vector<Value>& f, bool fuse, ProgramStats* stats) {
    return run_program(graph, f, variables, {Device{}, 2, true, fuse}, x, input, stats);
  };
  ProgramStats separate, fused, fetched;
  const std::vector<Tensor> a = run(fetches, false, &separate), b = run(fetches, true, &fused);
  EXPECT_EQ(fused.fused_nodes, 1);
  EXPECT_EQ(fused.num_kernels, separate.num_kernels - 1);
  ASSERT_EQ(a[1].numel(), b[1].numel());
  EXPECT_EQ(std::memcmp(a[1].raw_data(), b[1].raw_data(), a[1].nbytes()), 0);
  const Node* term = nullptr;  // the Mul that the AddN reads
  for (const auto& node : graph.nodes())
    if (node->op == "Mul") term = node.get();
  ASSERT_NE(term, nullptr);
  std::vector<Value> with_term = fetches;
  with_term.push_back(Value{const_cast<Node*>(term), 0});
  run(with_term, true, &fetched);
  EXPECT_EQ(fetched.fused_nodes, 0);
}

// LRN after a ReLU: its gradient takes the ReLU gradient (LRNGrad+ReluGrad, zero where the ReLU's
// output is not positive).
TEST(LayoutTest, LrnGradientTakesTheReluGradientAfterIt) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{3, 4, 7, 7});
  Value w = s.get_variable("w", Shape{12, 4, 3, 3}, Initializer::he_normal());
  Value h = ops::relu(s, ops::conv2d(s, images, w, {{1, 1}, ops::Padding::same}));
  Value loss = ops::l2_loss(s, ops::lrn(s, h, {}));
  std::vector<Value> fetches = {loss};
  for (Value g : gradients(s, loss, {images, w})) fetches.push_back(g);
  VariableStore variables;
  variables.initialize(graph, 8);
  const Tensor input = testing::random_tensor(Shape{3, 4, 7, 7}, 4);
  ProgramStats separate, fused;
  expect_close(
      run_program(graph, fetches, variables, {Device{}, 2, true, false}, images, input, &separate),
      run_program(graph, fetches, variables, {Device{}, 2, true, true}, images, input, &fused));
  EXPECT_EQ(fused.fused_nodes, 1);
}

// LRN reads and writes the convolutions' channel blocks (nChw16c with AVX-512) with no conversion
// on either side: the forward pass, LRNGrad and LRNGrad+ReluGrad give what plain NCHW gives, for
// a window inside a block, one across blocks, one as wide as a block, and every exponent path.
// (What the values around the LRNs still meet is the convolutions' own choice: the weights, and
// the first convolution's gradient, which reads dy in another layout.)
TEST(LayoutTest, LrnOnChannelBlocksMatchesPlainWithNoConversions) {
  const ops::LRNAttrs cases[] = {
      {4, 1.0f, 0.001f / 9, 0.75f}, {1, 2.0f, 0.1f, 0.5f}, {16, 1.0f, 0.05f, 0.6f}};
  for (const ops::LRNAttrs& a : cases) {
    SCOPED_TRACE(fmt::format("depth_radius {} beta {}", a.depth_radius, a.beta));
    Graph graph;
    Scope s(graph);
    Value images = s.placeholder("images", Shape{3, 5, 6, 6});
    Value w1 = s.get_variable("w1", Shape{48, 5, 3, 3}, Initializer::he_normal());
    Value w2 = s.get_variable("w2", Shape{8, 48, 3, 3}, Initializer::he_normal());
    const ops::Conv2DAttrs same{{1, 1}, ops::Padding::same};
    Value h = ops::relu(s, ops::conv2d(s, images, w1, same));
    Value pooled = ops::max_pool(s, ops::lrn(s, h, a), {{2, 2}, {2, 2}, ops::Padding::valid});
    Value loss = ops::l2_loss(s, ops::conv2d(s, ops::lrn(s, pooled, a), w2, same));
    std::vector<Value> fetches = {loss};
    for (Value g : gradients(s, loss, {images, w1, w2})) fetches.push_back(g);
    VariableStore variables;
    variables.initialize(graph, 9);
    const Tensor input = testing::random_tensor(Shape{3, 5, 6, 6}, 6);
    expect_close(run_program(graph, fetches, variables, {Device{}, 2, false}, images, input),
                 run_program(graph, fetches, variables, {Device{}, 2, true}, images, input));
    if (!cpu_info().avx512f) continue;
    Program program(graph, fetches, variables, {Device{}, 2});
    program.set_profiling(true);
    program.run();
    std::map<std::string, std::string> op_of;
    for (const auto& node : graph.nodes()) op_of[node->name] = node->op;
    int reorders = 0;
    for (const KernelTime& k : program.profile()) {
      if (k.op != "Reorder") continue;
      ++reorders;
      for (const char* op : {"Relu", "LRN", "MaxPool", "LRNGrad"})
        EXPECT_NE(op_of[k.node], op) << k.node << " was converted";
    }
    EXPECT_GT(reorders, 0);  // the images, the weights, the loss: the check above saw some
  }
}

// `node`'s kernel given its inputs in `layout` (plain: as they are), on one thread; the outputs
// plain. Checks that the kernel reads and writes that layout.
std::vector<Tensor> run_in_layout(const Node& node, std::span<const Tensor> inputs,
                                  const Layout& layout) {
  KernelContext context{Device{}, 1};
  context.input_layouts.assign(inputs.size(), layout);
  std::unique_ptr<Kernel> kernel = (*find_kernel(node.op, DeviceKind::cpu))(node, context);
  testing::Buffers buffers;
  KernelIO io;
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(kernel->input_layout(static_cast<int>(i)), layout) << node.op << " input " << i;
    Tensor t = buffers.make(node.inputs[i].spec(), Layout{}, Device{});
    t.copy_from(inputs[i]);
    io.inputs.push_back(
        testing::reorder(node.inputs[i], std::move(t), Layout{}, layout, Device{}, buffers));
  }
  EXPECT_EQ(kernel->output_layout(0), layout) << node.op;
  io.outputs.push_back(buffers.make(node.outputs[0], layout, Device{}));
  testing::run_kernel_once(*kernel, io, Device{});
  Tensor plain = testing::reorder(Value{const_cast<Node*>(&node), 0}, io.outputs[0].view(), layout,
                                  Layout{}, Device{}, buffers);
  std::vector<Tensor> out;
  out.push_back(plain.clone());
  return out;
}

// LRN and LRNGrad read and write the layout a bf16 convolution writes (channels last with AMX,
// nChw16c with AVX-512 alone) and give what they give on plain NCHW, for a window inside a vector
// of 16 channels and one across vectors.
TEST(LayoutTest, LrnReadsTheBf16ConvolutionsLayout) {
  if (!testing::cpu_has_bf16()) GTEST_SKIP() << "this CPU has no bf16 instructions";
  Graph graph;
  Scope s(graph);
  Value x = s.placeholder("x", Shape{3, 48, 5, 7});
  Value dy = s.placeholder("dy", Shape{3, 48, 5, 7});
  Value w = s.get_variable("w", Shape{48, 48, 3, 3}, Initializer::he_normal());
  Value y = ops::conv2d(s, x, w, {{1, 1}, ops::Padding::same});
  KernelContext conv_context{Device{}, 1};
  conv_context.precision = Precision::bf16;
  const Layout layout =
      (*find_kernel("Conv2D", DeviceKind::cpu))(*y.node, conv_context)->output_layout(0);
  ASSERT_FALSE(layout.is_plain());
  std::vector<Tensor> inputs;
  inputs.push_back(testing::random_tensor(x.shape(), 3));
  inputs.push_back(testing::random_tensor(dy.shape(), 4));
  const std::span<const Tensor> x_only = std::span<const Tensor>(inputs).first(1);
  for (const ops::LRNAttrs& a :
       {ops::LRNAttrs{4, 1.0f, 0.001f / 9, 0.75f}, ops::LRNAttrs{9, 2.0f, 0.1f, 0.5f}}) {
    SCOPED_TRACE(fmt::format("depth_radius {}", a.depth_radius));
    const Value forward = ops::lrn(s, x, a), backward = ops::lrn_grad(s, x, dy, a);
    expect_close(run_in_layout(*forward.node, x_only, Layout{}),
                 run_in_layout(*forward.node, x_only, layout));
    expect_close(run_in_layout(*backward.node, inputs, Layout{}),
                 run_in_layout(*backward.node, inputs, layout));
  }
}

// The fetches with plain layouts and one kernel per node, against blocked layouts and fusion:
// within f32 rounding.
void expect_blocked_and_fused_close_to_plain(const Graph& graph, const std::vector<Value>& fetches,
                                             VariableStore& variables, Value images,
                                             const Tensor& input) {
  auto run = [&](bool propagate) {
    return run_program(graph, fetches, variables, {Device{}, 2, propagate, propagate}, images,
                       input);
  };
  expect_close(run(false), run(true));
}

// Max pooling on a channel-blocked input whose channel count (24) is not a multiple of the block:
// MaxPoolGrad routes dy per lane and leaves the padding lanes alone, as the plain path does.
TEST(LayoutTest, MaxPoolGradientOnPaddedChannelBlocks) {
  Graph graph;
  Scope s(graph);
  Value images = s.placeholder("images", Shape{3, 5, 11, 11});
  Value w = s.get_variable("w", Shape{24, 5, 3, 3}, Initializer::he_normal());
  Value h = ops::relu(s, ops::conv2d(s, images, w, {{1, 1}, ops::Padding::same}));
  Value p = ops::max_pool(s, h, {{3, 3}, {2, 2}, ops::Padding::same});
  Value loss = ops::l2_loss(
      s, ops::conv2d(s, p, s.get_variable("w2", Shape{8, 24, 1, 1}, Initializer::he_normal()),
                     {{1, 1}, ops::Padding::valid}));
  std::vector<Value> fetches = {loss};
  for (Value g : gradients(s, loss, {images, w})) fetches.push_back(g);
  VariableStore variables;
  variables.initialize(graph, 4);
  const Tensor input = testing::random_tensor(Shape{3, 5, 11, 11}, 9);
  // (blocked and fused: MaxPoolGrad+ReluGrad)
  expect_blocked_and_fused_close_to_plain(graph, fetches, variables, images, input);
}

// Training batch norm on a convolution's blocked layout runs as loops over channel groups
// (batch_norm_groups.cc; groups of 8 or 16 channels: 16, 32 and 48 channels give one to six of
// them) with and without its ReLU: within f32 rounding of oneDNN's kernels on plain NCHW, the
// batch statistics and every gradient included.
TEST(LayoutTest, BatchNormOnChannelGroupsMatchesThePlainKernels) {
  for (int64_t channels : {16, 32, 48}) {
    SCOPED_TRACE(fmt::format("{} channels", channels));
    Graph graph;
    Scope s(graph);
    Value images = s.placeholder("images", Shape{6, 3, 7, 9});
    Value w = s.get_variable("w", Shape{channels, 3, 3, 3}, Initializer::he_normal());
    Value gamma = s.get_variable("gamma", Shape{channels}, Initializer::uniform(1.0f));
    Value beta = s.get_variable("beta", Shape{channels}, Initializer::uniform(1.0f));
    Value mean = s.get_variable("mean", Shape{channels}, Initializer::zeros(), Trainable::no);
    Value var = s.get_variable("var", Shape{channels}, Initializer::ones(), Trainable::no);
    // (a mean away from zero: the variance must not come from cancelling large sums)
    Value h = ops::bias_add(s, ops::conv2d(s, images, w, {{1, 1}, ops::Padding::same}),
                            s.constant("shift", Shape{channels}, 3.0f));
    ops::BatchNormResult bn = ops::batch_norm(s, h, gamma, beta, mean, var, {});
    Value y = ops::relu(s, bn.y);
    Value w2 = s.get_variable("w2", Shape{4, channels, 1, 1}, Initializer::he_normal());
    Value loss = ops::l2_loss(s, ops::conv2d(s, y, w2, {{1, 1}, ops::Padding::valid}));
    std::vector<Value> fetches = {loss, y, bn.y.node->output(1), bn.y.node->output(2)};
    for (Value g : gradients(s, loss, {images, w, gamma, beta})) fetches.push_back(g);
    VariableStore variables;
    variables.initialize(graph, 4);
    expect_blocked_and_fused_close_to_plain(graph, fetches, variables, images,
                                            testing::random_tensor(Shape{6, 3, 7, 9}, 9));
  }
}

// --profile's source: every scheduled kernel, reorders included, timed on every profiled run.
TEST(LayoutTest, ProfilingTimesEveryKernelAndReorder) {
  ChainGraph c;
  Program program(c.graph, c.fetches, c.variables, {Device{}, 2});
  program.input(c.images).copy_from(testing::random_tensor(Shape{4, 3, 12, 12}, 5));
  program.run();
  for (const KernelTime& k : program.profile()) EXPECT_EQ(k.runs, 0) << k.node;  // off by default
  program.set_profiling(true);
  program.run();
  program.run();
  const std::vector<KernelTime> profile = program.profile();
  ASSERT_EQ(static_cast<int>(profile.size()),
            program.stats().num_kernels + program.stats().reorders);
  double total = 0;
  int reorders = 0, convolutions = 0;
  for (const KernelTime& k : profile) {
    EXPECT_EQ(k.runs, 2) << k.node;
    EXPECT_GE(k.seconds, 0.0) << k.node;
    total += k.seconds;
    reorders += k.op == "Reorder";
    convolutions += k.op == "Conv2D" || k.op == "Conv2D+BiasAdd+Relu";
  }
  EXPECT_GT(total, 0.0);
  EXPECT_EQ(reorders, program.stats().reorders);
  EXPECT_EQ(convolutions, 3);
  program.set_profiling(false);  // clears the times, and runs untimed
  program.run();
  for (const KernelTime& k : program.profile()) EXPECT_EQ(k.runs, 0) << k.node;
}

}  // namespace
}  // namespace tower
